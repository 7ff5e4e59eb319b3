#!/usr/bin/env python3
"""Trains ExpertScope's embedded default model: a tiny ERNIE-4.5-MoE (transformers'
Ernie4_5_MoeForCausalLM itself) on the chat data of prepare_data.py, then writes the hub layout,
proves it with from_pretrained, and makes the CI reference (HF float32 logits + greedy ids).

GPU machine (torch + transformers 5 + sentencepiece + numpy):
    python3 resources/models/train_default.py --out OUTDIR [--steps N]
Writes OUTDIR/default/{config.json, model.safetensors, generation_config.json, tokenizer.model,
tokenizer_config.json, special_tokens_map.json, ref_logits.npy, reference.json} and
OUTDIR/report.json (losses, held-out loss/perplexity per mode, samples, timings).
Balancing: HF's router auxiliary loss (output_router_logits, router_aux_loss_coef); the
correction bias stays zero. Seed fixed (SEED); the step count is fixed by --steps.
"""
import argparse, json, math, os, random, re, shutil, sys, time

SEED = 1234
SYSTEM = {
    "tech": "你是一名资深工程师。请从工程实现的角度回答：先用一句话给出结论，再用简洁的要点列出"
            "关键技术细节、原理、权衡与限制；需要时给出代码、公式或数据。不寒暄，不重复问题，"
            "不确定的地方直接说明。",
    "creative": "你是一位擅长模仿文风的创意写作者。请根据用户指定的作者、体裁或示例文本，模仿其语言"
                "风格、节奏、句式和修辞进行创作；内容保持原创，不大段照抄原文。若未指定风格，请自由"
                "发挥，语言生动、富有画面感。",
}
CONFIG = {
    "architectures": ["Ernie4_5_MoeForCausalLM"], "model_type": "ernie4_5_moe",
    "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 6,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
    "vocab_size": 6000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-05,
    "hidden_act": "silu", "use_bias": False, "tie_word_embeddings": True,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "bfloat16",
    "use_cache": True, "rope_theta": 500000.0,
    "moe_num_experts": 12, "moe_k": 2, "moe_intermediate_size": 80, "moe_num_shared_experts": 1,
    "moe_layer_start_index": 1, "moe_layer_end_index": -1, "moe_layer_interval": 1,
    "moe_norm_min": 1e-12, "router_aux_loss_coef": 0.02, "output_router_logits": False,
}
MAX_LEN = 384
BATCH = 96
LR, MIN_LR_FRAC, WARMUP, WD = 2e-3, 0.1, 100, 0.1
HERE = os.path.dirname(os.path.abspath(__file__))
REF_N_NEW = 16


def render_prompt(sys_on, mode, user):
    return "<|begin_of_sentence|>" + (SYSTEM[mode] + "\n" if sys_on else "") + "User: " + user + "\nAssistant: "


def load_records(split):
    with open(os.path.join(HERE, "data", split + ".jsonl"), encoding="utf-8") as f:
        return [json.loads(l) for l in f]


def encode(sp, eos_id, r):
    p = sp.encode(render_prompt(r["sys"], r["mode"], r["user"]))
    a = sp.encode(r["assistant"]) + [eos_id]
    ids = (p + a)[:MAX_LEN]
    return ids, min(len(p), len(ids))


def batches(items, rng, bs):
    idx = list(range(len(items)))
    rng.shuffle(idx)
    mega = bs * 32
    out = []
    for i in range(0, len(idx), mega):
        chunk = sorted(idx[i:i + mega], key=lambda j: len(items[j][0]))
        out += [chunk[k:k + bs] for k in range(0, len(chunk), bs)]
    rng.shuffle(out)
    return out


def collate(items, sel, torch, device):
    L = max(len(items[j][0]) for j in sel)
    ids = torch.zeros((len(sel), L), dtype=torch.long)
    att = torch.zeros((len(sel), L), dtype=torch.long)
    lab = torch.full((len(sel), L), -100, dtype=torch.long)
    for b, j in enumerate(sel):
        t, p = items[j]
        ids[b, :len(t)] = torch.tensor(t)
        att[b, :len(t)] = 1
        lab[b, p:len(t)] = torch.tensor(t[p:])  # loss on the answer and its end token only
    return ids.to(device), att.to(device), lab.to(device)


def bf16_round_np(a, np):
    u = np.ascontiguousarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def hub_tensors(model, cfg, torch, swap_gate_up=False):
    """The trained state dict in the hub's exact names: per-expert 2-D weights, fp32 router."""
    H, F, E = cfg["hidden_size"], cfg["moe_intermediate_size"], cfg["moe_num_experts"]
    out = {}
    for k, v in model.state_dict().items():
        v = v.detach().float().cpu()
        if k == "lm_head.weight" and cfg["tie_word_embeddings"]:
            continue
        m = re.match(r"^(model\.layers\.\d+\.mlp\.experts)\.(\w+?)(\.weight)?$", k)
        if m and v.dim() == 3:
            base, what = m.group(1), m.group(2)
            assert v.shape[0] == E, (k, v.shape)
            for e in range(E):
                w = v[e]
                if what == "gate_up_proj":
                    if w.shape == (H, 2 * F):
                        w = w.t()
                    assert w.shape == (2 * F, H), (k, v.shape)
                    g, u = w[:F], w[F:]
                    if swap_gate_up:
                        g, u = u, g
                    out[f"{base}.{e}.gate_proj.weight"] = g.contiguous()
                    out[f"{base}.{e}.up_proj.weight"] = u.contiguous()
                elif what == "down_proj":
                    if w.shape == (F, H):
                        w = w.t()
                    assert w.shape == (H, F), (k, v.shape)
                    out[f"{base}.{e}.down_proj.weight"] = w.contiguous()
                elif what in ("gate_proj", "up_proj"):
                    if w.shape == (H, F):
                        w = w.t()
                    out[f"{base}.{e}.{what}.weight"] = w.contiguous()
                else:
                    raise SystemExit(f"unknown fused expert tensor {k} {tuple(v.shape)}")
            continue
        if k.endswith("e_score_correction_bias"):
            # transformers 5 keeps it under mlp.gate; the hub (and the engine) under mlp.
            k = k.replace(".mlp.gate.moe_statics.", ".mlp.moe_statics.")
            v = v.reshape(1, E)
        out[k] = v
    tensors = {}
    for k, v in out.items():
        keep32 = k.endswith("mlp.gate.weight") or k.endswith("e_score_correction_bias")
        tensors[k] = v.contiguous() if keep32 else v.to(torch.bfloat16).contiguous()
    return tensors


def write_folder(folder, tensors, sp_dir):
    from safetensors.torch import save_file
    os.makedirs(folder, exist_ok=True)
    save_file(tensors, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    cfg = dict(CONFIG)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "do_sample": True,
                   "temperature": 0.8, "top_p": 0.8, "repetition_penalty": 1.0}, f, indent=2)
    for fn in ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copy(os.path.join(sp_dir, fn), os.path.join(folder, fn))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-seconds", type=float, default=420.0, help="safety stop of the training loop")
    args = ap.parse_args()
    import numpy as np, torch, transformers
    import sentencepiece as spm
    from transformers import AutoConfig, AutoModelForCausalLM
    t0 = time.time()
    random.seed(SEED); np.random.seed(SEED); torch.manual_seed(SEED)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tok_dir = os.path.join(HERE, "default")
    sp = spm.SentencePieceProcessor(model_file=os.path.join(tok_dir, "tokenizer.model"))
    assert sp.get_piece_size() <= CONFIG["vocab_size"], sp.get_piece_size()
    eos_s = sp.piece_to_id("<|end_of_sentence|>")
    report = {"seed": SEED, "config": CONFIG, "torch": torch.__version__,
              "transformers": transformers.__version__, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}

    train = [encode(sp, eos_s, r) for r in load_records("train")]
    held_recs = load_records("heldout")
    held = [encode(sp, eos_s, r) for r in held_recs]
    report["train_samples"] = len(train)
    report["train_tokens"] = sum(len(t) for t, _ in train)
    print(f"tokenized {len(train)} train / {len(held)} held-out in {time.time() - t0:.1f}s, "
          f"{report['train_tokens']} train tokens", flush=True)

    cfg_dir = os.path.join(args.out, "init")
    os.makedirs(cfg_dir, exist_ok=True)
    with open(os.path.join(cfg_dir, "config.json"), "w") as f:
        json.dump(CONFIG, f)
    config = AutoConfig.from_pretrained(cfg_dir)
    config.output_router_logits = True
    model = transformers.Ernie4_5_MoeForCausalLM._from_config(config, attn_implementation="sdpa").float().to(device)
    with torch.no_grad():
        for n, b in list(model.named_parameters()) + list(model.named_buffers()):
            if "e_score_correction_bias" in n:
                b.zero_()
    n_params = sum(p.numel() for p in model.parameters())
    report["parameters"] = n_params
    print(f"model {type(model).__name__}: {n_params} parameters", flush=True)
    for n, p in model.named_parameters():
        if ".experts" in n or "moe_statics" in n or ".gate." in n:
            print("  ", n, tuple(p.shape), p.dtype, flush=True)
            if ".layers.2." in n:
                break

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2 and "moe_statics" not in n and p.requires_grad]
    nodecay = [p for n, p in model.named_parameters() if p.dim() < 2 and "moe_statics" not in n and p.requires_grad]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WD}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=LR, betas=(0.9, 0.95), eps=1e-8)

    def lr_at(s):
        if s < WARMUP:
            return LR * (s + 1) / WARMUP
        q = min(1.0, (s - WARMUP) / max(1, args.steps - WARMUP))
        return LR * (MIN_LR_FRAC + (1 - MIN_LR_FRAC) * 0.5 * (1 + math.cos(math.pi * q)))

    rng = random.Random(SEED)
    order, step, losses = [], 0, []
    model.train()
    t_train = time.time()
    stopped_early = False
    while step < args.steps:
        if not order:
            order = batches(train, rng, BATCH)
        sel = order.pop()
        ids, att, lab = collate(train, sel, torch, device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=device == "cuda"):
            out = model(input_ids=ids, attention_mask=att, labels=lab, output_router_logits=True)
        loss = out.loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        aux = float(out.aux_loss) if getattr(out, "aux_loss", None) is not None else float("nan")
        losses.append((step, float(loss), aux))
        if step % 100 == 0 or step < 5:
            print(f"step {step} loss {float(loss):.4f} aux {aux:.4f} lr {lr_at(step):.2e} "
                  f"{time.time() - t_train:.1f}s", flush=True)
        step += 1
        if time.time() - t_train > args.max_seconds:
            stopped_early = True
            print(f"time budget reached at step {step}", flush=True)
            break
    train_s = time.time() - t_train
    report.update(steps=step, steps_planned=args.steps, stopped_early=stopped_early, train_seconds=train_s,
                  tokens_seen=None, loss_curve=losses[::max(1, len(losses) // 60)])
    print(f"trained {step} steps in {train_s:.1f}s", flush=True)

    # ---- hub layout, proven by from_pretrained, and equal to the trained model (bf16-rounded)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    model.eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if not (n.endswith("mlp.gate.weight") or "e_score_correction_bias" in n):
                p.copy_(p.to(torch.bfloat16).float())
    folder = os.path.join(args.out, "default")
    probe = torch.tensor([sp.encode(render_prompt(1, "tech", "【技术解析模式】What does ls do?"))], device=device)
    with torch.no_grad():
        want = model(probe).logits[0].float()
    model2 = None
    for swap in (False, True):
        shutil.rmtree(folder, ignore_errors=True)
        write_folder(folder, hub_tensors(model, CONFIG, torch, swap), tok_dir)
        model2, info = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, output_loading_info=True,
                                                            attn_implementation="eager")
        problems = {k: list(v) for k, v in info.items()
                    if k in ("missing_keys", "unexpected_keys", "mismatched_keys") and v}
        if problems:
            raise SystemExit(f"layout not proven by from_pretrained: {problems}")
        model2 = model2.to(device).eval()
        with torch.no_grad():
            got = model2(probe).logits[0].float()
        e = float(((got - want) ** 2).sum() / (want ** 2).sum())
        print(f"reload (swap={swap}): NMSE vs trained {e:.3e}", flush=True)
        if e < 1e-6:
            report["reload_nmse"] = e
            break
    else:
        raise SystemExit("the written checkpoint does not reproduce the trained model")
    del model
    m = model2

    # ---- held-out loss / perplexity per mode (answer tokens), on the shipped weights
    def eval_loss(items, recs):
        tot = {}
        with torch.no_grad():
            for i in range(0, len(items), 64):
                sel = list(range(i, min(len(items), i + 64)))
                ids, att, lab = collate(items, sel, torch, device)
                logits = m(input_ids=ids, attention_mask=att).logits.float()
                ce = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]),
                                                       lab[:, 1:].reshape(-1), ignore_index=-100, reduction="none")
                ce = ce.view(len(sel), -1)
                for b, j in enumerate(sel):
                    mode = recs[j]["mode"]
                    msk = lab[b, 1:] != -100
                    s = tot.setdefault(mode, [0.0, 0])
                    s[0] += float(ce[b][msk].sum()); s[1] += int(msk.sum())
        return {k: {"loss": v[0] / v[1], "ppl": math.exp(v[0] / v[1]), "tokens": v[1]} for k, v in tot.items()}

    report["heldout"] = eval_loss(held, held_recs)
    tr_recs = load_records("train")
    sub = list(range(0, len(train), max(1, len(train) // 2000)))
    report["train_subset"] = eval_loss([train[i] for i in sub], [tr_recs[i] for i in sub])
    print("held-out:", json.dumps(report["heldout"]), "train subset:", json.dumps(report["train_subset"]), flush=True)

    # ---- samples (greedy and preset sampling), built-in preset prompts
    prompts = [(1, "tech", "【技术解析模式】What does ls do?"), (0, "tech", "【技术解析模式】What does ls do?"),
               (1, "tech", "【技术解析模式】grep 命令有什么用？"), (1, "tech", "【技术解析模式】What is `tar`?"),
               (0, "tech", "【技术解析模式】Explain ssh."),
               (1, "creative", "【创意写作模式】写一首唐诗"), (0, "creative", "【创意写作模式】写一首唐诗"),
               (1, "creative", "【创意写作模式】写一首宋诗"), (1, "creative", "【创意写作模式】模仿李白的风格写一首诗"),
               (1, "creative", "【创意写作模式】Tell me a fortune.")]
    samples = []
    torch.manual_seed(SEED)
    for sys_on, mode, user in prompts:
        ids = torch.tensor([sp.encode(render_prompt(sys_on, mode, user))], device=device)
        row = {"system": bool(sys_on), "user": user}
        for tag, kw in (("greedy", dict(do_sample=False)),
                        ("sampled", dict(do_sample=True, temperature=0.3 if mode == "tech" else 0.9,
                                         top_p=0.8 if mode == "tech" else 0.95))):
            with torch.no_grad():
                g = m.generate(ids, max_new_tokens=120, eos_token_id=[2, eos_s], pad_token_id=0, **kw)
            row[tag] = sp.decode([t for t in g[0, ids.shape[1]:].tolist() if t not in (2, eos_s)])
        samples.append(row)
        print(json.dumps(row, ensure_ascii=False), flush=True)
    report["samples"] = samples

    # ---- CI reference: HF float32 eager logits + greedy continuation, the safest of a few prompts
    cands = [(1, "tech", "【技术解析模式】What does ls do?"), (1, "creative", "【创意写作模式】写一首唐诗"),
             (1, "tech", "【技术解析模式】What is `grep`?"), (0, "tech", "【技术解析模式】What does ls do?"),
             (0, "creative", "【创意写作模式】写一首唐诗"), (1, "creative", "【创意写作模式】写一首宋诗")]
    best = None
    for c in cands:
        prompt = sp.encode(render_prompt(*c))
        with torch.no_grad():
            logits = m(torch.tensor([prompt], device=device)).logits[0].float().cpu().numpy()
            seq, greedy, margins = list(prompt), [], []
            for _ in range(REF_N_NEW):
                o = m(torch.tensor([seq], device=device)).logits[0, -1].float().cpu().numpy()
                top2 = np.sort(o)[-2:]
                margins.append(float(top2[1] - top2[0]))
                nxt = int(np.argmax(o)); greedy.append(nxt); seq.append(nxt)
        ts = np.sort(logits, axis=-1)
        tm = float(np.min(ts[:, -1] - ts[:, -2]))
        score = min(min(margins), tm)
        print(f"reference candidate {c[1]} sys={c[0]}: margins {min(margins):.3e}/{tm:.3e}", flush=True)
        if best is None or score > best[0]:
            best = (score, c, prompt, logits, greedy, min(margins), tm)
    _, c, prompt, logits, greedy, gm, tm = best
    np.save(os.path.join(folder, "ref_logits.npy"), logits.astype(np.float32))
    with open(os.path.join(folder, "reference.json"), "w") as f:
        json.dump({"seed": SEED, "prompt": render_prompt(*c), "prompt_ids": prompt, "greedy_ids": greedy,
                   "greedy_text": sp.decode(greedy), "n_new": REF_N_NEW, "min_greedy_margin": gm,
                   "min_teacher_forced_margin": tm, "hf_class": type(m).__name__, "device": device,
                   "dtype": "float32", "transformers": transformers.__version__, "torch": torch.__version__},
                  f, indent=2, ensure_ascii=False)
    report["reference"] = {"prompt": render_prompt(*c), "n_prompt": len(prompt), "margins": [gm, tm]}
    report["total_seconds"] = time.time() - t0
    with open(os.path.join(args.out, "report.json"), "w") as f:
        json.dump(report, f, indent=2, ensure_ascii=False)
    print(f"done in {report['total_seconds']:.1f}s", flush=True)


if __name__ == "__main__":
    main()
