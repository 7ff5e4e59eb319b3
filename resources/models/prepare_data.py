#!/usr/bin/env python3
"""Builds the chat training data of the embedded default model from Debian packages.

Runs on the build machine with python3's standard library only:
    python3 resources/models/prepare_data.py            # writes resources/models/data/*.jsonl
Sources (see default/NOTICE): `man -k .` (the NAME lines of the installed manual pages, man-db),
fortunes-zh (tang300, song100, chinese), fortunes-min (fortunes). Every record is one chat:
{"mode": "tech"|"creative", "sys": 0|1, "user": ..., "assistant": ...}; the training script adds
the preset's system prompt when sys is 1 and renders the ERNIE chat template.
A deterministic hash of the item (command name, poem title) puts about 4% of items in the
held-out split, so held-out questions are about commands and poems never seen in training.
"""
import hashlib, json, os, random, re, subprocess, sys

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "data")
FORT = "/usr/share/games/fortunes"
TECH, CREA = "【技术解析模式】", "【创意写作模式】"
ANSI = re.compile(r"\x1b\[[0-9;]*m")

SECTION = {"1": ("user command", "用户命令"), "2": ("system call", "系统调用"),
           "3": ("library function", "库函数"), "4": ("special file", "设备文件"),
           "5": ("file format", "文件格式"), "6": ("game", "游戏"),
           "7": ("overview or convention", "概述与约定"), "8": ("system administration command", "系统管理命令")}

EN_Q = ["What does `{n}` do?", "What does {n} do?", "What is `{n}`?", "Explain {n}.",
        "What is {n} used for?", "Describe the {n} {kind}.", "Briefly, what is `{n}`?"]
ZH_Q = ["`{n}` 是做什么的？", "{n} 命令有什么用？", "介绍一下 {n}。", "解释一下 `{n}`。", "{n} 是什么？"]


def heldout(key):
    return int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) % 25 == 0


def tech_records(rng):
    out = subprocess.run(["man", "-k", "."], capture_output=True, text=True, check=False).stdout
    seen, recs = set(), []
    for line in sorted(out.splitlines()):
        m = re.match(r"^(\S+) \((\w+)\)\s+- (.+)$", line.strip())
        if not m:
            continue
        name, sec, desc = m.group(1), m.group(2), m.group(3).strip().rstrip(".")
        if (name, sec) in seen or len(desc) < 4 or len(desc) > 160 or "unknown subject" in desc \
                or name.endswith("..."):
            continue
        seen.add((name, sec))
        kind_en, kind_zh = SECTION.get(sec[0], ("manual page", "手册页"))
        en_a = (f"`{name}` is a {kind_en}: {desc}.\n"
                f"- Section: {sec} ({kind_en})\n"
                f"- Reference: `man {sec} {name}`")
        zh_a = (f"结论：`{name}` 是{kind_zh}，作用：{desc}。\n"
                f"- 手册章节：{sec}（{kind_zh}）\n"
                f"- 详见：`man {sec} {name}`")
        split = "heldout" if heldout("man:" + name) else "train"
        # Section-1/8 commands get more phrasings: they are what people ask about.
        n_en = 3 if sec[0] in "18" else 1
        for q in rng.sample(EN_Q, n_en):
            recs.append((split, {"mode": "tech", "sys": int(rng.random() < 0.5),
                                 "user": TECH + q.format(n=name, kind=kind_en), "assistant": en_a}))
        if sec[0] in "18" or rng.random() < 0.3:
            q = rng.choice(ZH_Q)
            recs.append((split, {"mode": "tech", "sys": int(rng.random() < 0.5),
                                 "user": TECH + q.format(n=name), "assistant": zh_a}))
    return recs


def fortunes(fn):
    path = os.path.join(FORT, fn)
    if not os.path.exists(path):
        sys.exit(f"{path}: missing (apt-get install fortunes-zh fortunes-min)")
    text = ANSI.sub("", open(path, encoding="utf-8", errors="replace").read())
    return [e.strip("\n") for e in text.split("\n%\n") if e.strip()]


def poem_records(rng, fn, genre):
    recs = []
    for e in fortunes(fn):
        lines = [l.strip() for l in e.splitlines()]
        lines = [l for l in lines if l]
        if len(lines) < 3:
            continue
        title = re.sub(r"^题目[:：]", "", lines[0]).strip()
        author = re.sub(r"^作者[:：]", "", lines[1]).strip()
        author = re.sub(r"（.*?）|\(.*?\)", "", author).strip()
        body = "\n".join(lines[2:])
        if len(body) > 500:
            continue
        t = re.sub(r"[《》]", "", title.split("》")[0] + "》") if "》" in title else title
        answer = f"{title}\n{body}"
        split = "heldout" if heldout(fn + ":" + title + author) else "train"
        prompts = [f"写一首{genre}", f"写一首{genre}。", f"模仿{author}的风格写一首诗",
                   f"以《{t}》为题写一首诗", f"写一首古诗", f"Write a classical Chinese poem."]
        for q in rng.sample(prompts, 3):
            recs.append((split, {"mode": "creative", "sys": int(rng.random() < 0.5),
                                 "user": CREA + q, "assistant": answer}))
    return recs


def prose_records(rng):
    recs = []
    for e in fortunes("chinese.u8"):
        body = "\n".join(l.rstrip() for l in e.splitlines()).strip()
        if len(body) < 8 or len(body) > 240:
            continue
        q = rng.choice(["写一段富有哲理的短文", "说一句有意思的话", "写一段短文", "给我一句格言"])
        split = "heldout" if heldout("zh:" + body) else "train"
        recs.append((split, {"mode": "creative", "sys": int(rng.random() < 0.5),
                             "user": CREA + q, "assistant": body}))
    for e in fortunes("fortunes.u8"):
        body = "\n".join(l.rstrip() for l in e.splitlines()).strip()
        if len(body) < 8 or len(body) > 400:
            continue
        split = "heldout" if heldout("en:" + body) else "train"
        for q in rng.sample(["Write a witty saying.", "Tell me a fortune.", "Write something funny.",
                             "Write a short quip in the style of a fortune cookie."], 2):
            recs.append((split, {"mode": "creative", "sys": int(rng.random() < 0.5),
                                 "user": CREA + q, "assistant": body}))
    return recs


def main():
    rng = random.Random(20261129)
    recs = tech_records(rng)
    n_tech = len(recs)
    recs += poem_records(rng, "tang300.u8", "唐诗")
    recs += poem_records(rng, "song100.u8", "宋诗")
    recs += prose_records(rng)
    os.makedirs(OUT, exist_ok=True)
    counts = {}
    for split in ("train", "heldout"):
        rows = [r for s, r in recs if s == split]
        rng.shuffle(rows)
        with open(os.path.join(OUT, split + ".jsonl"), "w", encoding="utf-8") as f:
            for r in rows:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
        for r in rows:
            counts[(split, r["mode"])] = counts.get((split, r["mode"]), 0) + 1
    # Held-out prompts for the routing measurement: one user message per line.
    for mode, fn in (("tech", "heldout_tech_prompts.txt"), ("creative", "heldout_creative_prompts.txt")):
        rows = [r for s, r in recs if s == "heldout" and r["mode"] == mode]
        rows = sorted({r["user"] for r in rows})
        random.Random(7).shuffle(rows)
        with open(os.path.join(OUT, fn), "w", encoding="utf-8") as f:
            f.write("\n".join(rows[:200]) + "\n")
    print(f"tech records {n_tech}, total {len(recs)}; " +
          ", ".join(f"{s}/{m}: {n}" for (s, m), n in sorted(counts.items())))


if __name__ == "__main__":
    main()
