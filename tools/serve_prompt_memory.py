#!/usr/bin/env python3
"""The server's memory under oversize prompts: starts `expertscope-cli serve` on a free port, posts
--clients prompts of --bytes bytes at once to /v1/completions (each far over the context, so each
is refused with a 400), --rounds times, and prints the server's RSS (/proc/PID/status VmRSS)
before, at its peak (sampled every 10 ms) and after each round. Python's standard library only:

    python3 tools/serve_prompt_memory.py build/cpu/app/expertscope-cli --model tests/data/moe-shared
    python3 tools/serve_prompt_memory.py CLI --model DIR --clients 32 --bytes 1048000 --rounds 3

A server that keeps what tokenizing such prompts cost grows with every round; one that refuses
them by their length, or gives the memory back, stays flat.
"""
import argparse
import json
import re
import socket
import subprocess
import threading
import time


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return -1.0


def post(port, body):
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body) + body)
        answer = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return answer.split(b"\r\n", 1)[0].decode(errors="replace")
            answer += chunk


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cli")
    ap.add_argument("--model", required=True)
    ap.add_argument("--clients", type=int, default=32)
    ap.add_argument("--bytes", type=int, default=1048000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()

    server = subprocess.Popen([a.cli, "serve", "--model", a.model, "--port", "0", "--threads", str(a.threads)],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        m = re.search(r"listening on http://[^:]+:(\d+)", server.stdout.readline())
        if not m:
            raise SystemExit("the server did not start")
        port = int(m.group(1))
        body = json.dumps({"prompt": ("word " * (a.bytes // 5 + 1))[:a.bytes], "max_tokens": 1}).encode()
        peak = [0.0]
        sampling = [True]

        def sample():
            while sampling[0]:
                peak[0] = max(peak[0], rss_mib(server.pid))
                time.sleep(0.01)

        sampler = threading.Thread(target=sample)
        sampler.start()
        print(f"RSS before: {rss_mib(server.pid):.1f} MiB")
        for r in range(a.rounds):
            answers = []
            clients = [threading.Thread(target=lambda: answers.append(post(port, body))) for _ in range(a.clients)]
            t0 = time.time()
            for c in clients:
                c.start()
            for c in clients:
                c.join()
            time.sleep(0.3)
            statuses = sorted(set(answers))
            print(f"round {r + 1}: {a.clients} × {a.bytes} bytes in {time.time() - t0:.2f} s ({', '.join(statuses)}); "
                  f"RSS after {rss_mib(server.pid):.1f} MiB, peak so far {peak[0]:.1f} MiB")
        sampling[0] = False
        sampler.join()
    finally:
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
