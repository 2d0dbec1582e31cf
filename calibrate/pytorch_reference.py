#!/usr/bin/env python3
"""One GPU's training step of a decoder-only transformer in plain PyTorch: a reference
for what clustersim models and for what its real backend (`clustersim real`) measures.

Precision recipe (the common one): FP32 parameters, the forward pass under
torch.autocast(dtype=torch.bfloat16) (so matrix products, attention and activations
run in BF16; autocast keeps norms and the loss in FP32), the logits cast to FP32 for the
cross-entropy, gradients in FP32, torch.nn.utils.clip_grad_norm_(1.0) and
torch.optim.AdamW(fused=True) on the FP32 parameters. No torch.compile, no activation
recomputation, no fused kernels beyond what eager PyTorch picks.

The layers are the ones clustersim plans (plan/stage_*.cc, plan/model.cc):
token embedding (GPT: plus a learned position table); per layer a norm (GPT: LayerNorm
with bias; Llama: RMSNorm), one fused QKV linear of (heads + 2*kv_heads)*head_dim
outputs (GQA when kv_heads < heads), rotary embedding (Llama), causal
scaled_dot_product_attention (GQA through enable_gqa=True where an SDPA backend other
than the math one takes it, else K/V repeated), output projection, residual, norm, MLP
(gelu: up + down; swiglu: gate and up fused as one linear of 2*ffn_hidden, then down),
residual; final norm, logits linear (GPT: tied to the embedding), cross-entropy.
The GPT/Llama choices follow ffn_type as in clustersim's presets (gelu: biases, LayerNorm,
learned positions, tied embeddings; swiglu: none of them, RMSNorm, rotary) and can be set
one by one (--norm, --rope/--no-rope, --tied/--untied, --biases/--no-biases).

Timing: --warmup steps, then --iterations steps, each between two CUDA events: the
forward and backward of --micro-batches micro-batches (gradient accumulation), clip,
optimizer step and zero_grad. iteration_time_s is the median step. One more step runs
under torch.profiler afterwards (not timed) and its GPU kernels become `spans` rows.

FLOPs (stated, as clustersim counts model FLOPs, plan/stage_*.cc):
  P = matrix-product weights = layers*(hidden*(heads+2*kv_heads)*head_dim
      + heads*head_dim*hidden + mlp_matrices*hidden*ffn_hidden) + vocab*hidden (logits)
      (embedding lookup, norms, biases and positions are no matrix products)
  T = tokens per step = micro_batch * micro_batches * seq_len
  model_flops = 6*P*T + 6*layers*seq_len*hidden*T
      (causal attention: the forward's QK^T and PV are 4*seq*seq*hidden per sequence
       and layer, halved by the mask; backward twice the forward)
  tflops_per_gpu = model_flops / iteration_time_s / 1e12   (same meaning as clustersim's)
  tflops_per_gpu_noncausal = (6*P*T + 12*layers*seq_len*hidden*T) / step / 1e12
      (the PaLM/Megatron-style count that does not halve the attention for the mask)

Output: one run appended to --out in clustersim's SQLite timeline schema
(reports/sqlite_writer.cc, user_version 1, application_id 'ClSi'): a `runs` row
(source 'pytorch', kind 'training', network_model 'pytorch', scenario_yaml the model
arguments as JSON, which is YAML), `metrics` rows, one `ranks` row (rank 0, program 0)
and `spans` rows (rank 0, stream 'stream<N>', op_index the kernel's order in the
profiled step, kind gemm|attention|memory from the kernel's name, start/end in ps
from the first kernel of the profiled step, bytes and flops 0, source 'pytorch').
`ops`, `groups`, `links`, `link_usage`, `requests`, `iterations` stay empty: there is no
clustersim plan behind a PyTorch run, so `span_view` (a join with `ops`) shows nothing.
clustersim's `runs.source` CHECK allows only 'sim' and 'real'; a file this script creates
allows 'pytorch' too (otherwise the same DDL). Appending to a database that clustersim
created is refused by that CHECK, and this script then says so: use a fresh file.

Prints one JSON line with the metrics.

Usage:
  python3 calibrate/pytorch_reference.py --layers 24 --hidden 2048 --heads 16 --kv-heads 16 \
      --ffn-hidden 8192 --ffn-type gelu --vocab 50257 --seq-len 2048 --micro-batch 4 \
      --micro-batches 1 --iterations 20 --warmup 5 --out out/pt.sqlite --name gpt3-1.3b
  python3 calibrate/pytorch_reference.py --scenario-json model.json --out out/pt.sqlite
  python3 calibrate/pytorch_reference.py --microbench out/microbench.jsonl
--scenario-json reads a JSON object with the keys layers, hidden, heads, kv_heads,
ffn_hidden, ffn_type, vocab, seq_len, micro_batch, micro_batches (and optionally name,
norm, rope, tied_embeddings, biases, iterations, warmup); options given on the command
line win over it. --microbench times BF16 and FP8 (e4m3, per-tensor scales,
torch._scaled_mm) GEMMs and softmax / dropout / add bandwidth, one JSON line each.
"""

import argparse
import json
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import threading

import torch
import torch.nn as nn
import torch.nn.functional as F

# ---------------------------------------------------------------------------------------
# clustersim's SQLite schema (reports/sqlite_writer.cc, kSchema), version 1.

SCHEMA_VERSION = 2
# torch.cuda._sleep's spin before a queued timing: ~2 ms at Hopper's clocks, longer than the
# host takes to dispatch an SDPA forward or its autograd backward.
SPIN_CYCLES = 4_000_000
APPLICATION_ID = 0x436C5369  # 'ClSi'

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
  run_id        INTEGER PRIMARY KEY AUTOINCREMENT,
  name          TEXT NOT NULL,
  source        TEXT NOT NULL CHECK (source IN ('sim', 'real', 'pytorch')),
  kind          TEXT NOT NULL,
  network_model TEXT NOT NULL,
  seed          INTEGER NOT NULL,
  scenario_yaml TEXT NOT NULL,
  complete      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS requests (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  request_id    INTEGER NOT NULL,
  replica       INTEGER NOT NULL,
  arrival_s     REAL NOT NULL,
  first_token_s REAL NOT NULL,
  finish_s      REAL NOT NULL,
  prompt_tokens INTEGER NOT NULL,
  output_tokens INTEGER NOT NULL,
  preemptions   INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS iterations (
  run_id         INTEGER NOT NULL REFERENCES runs(run_id),
  replica        INTEGER NOT NULL,
  start_s        REAL NOT NULL,
  end_s          REAL NOT NULL,
  requests       INTEGER NOT NULL,
  prefill_tokens INTEGER NOT NULL,
  decode_tokens  INTEGER NOT NULL,
  kv_blocks_used INTEGER NOT NULL,
  kv_blocks      INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS metrics (
  run_id INTEGER NOT NULL REFERENCES runs(run_id),
  key    TEXT NOT NULL,
  value  REAL
);
CREATE TABLE IF NOT EXISTS ranks (
  run_id    INTEGER NOT NULL REFERENCES runs(run_id),
  rank      INTEGER NOT NULL,
  node      INTEGER NOT NULL,
  local_gpu INTEGER NOT NULL,
  device    TEXT NOT NULL,
  program   INTEGER NOT NULL,
  mirror_of INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS groups (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  group_id INTEGER NOT NULL,
  kind     TEXT NOT NULL,
  size     INTEGER NOT NULL,
  ranks    TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS ops (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  program       INTEGER NOT NULL,
  op_index      INTEGER NOT NULL,
  name          TEXT NOT NULL,
  kind          TEXT NOT NULL,
  stream        TEXT NOT NULL,
  phase         TEXT NOT NULL,
  layer         INTEGER NOT NULL,
  micro_batch   INTEGER NOT NULL,
  dtype         TEXT NOT NULL,
  m             INTEGER NOT NULL,
  n             INTEGER NOT NULL,
  k             INTEGER NOT NULL,
  batch         INTEGER NOT NULL,
  heads         INTEGER NOT NULL,
  kv_heads      INTEGER NOT NULL,
  q_len         INTEGER NOT NULL,
  kv_len        INTEGER NOT NULL,
  head_dim      INTEGER NOT NULL,
  causal        INTEGER NOT NULL,
  bytes_read    INTEGER NOT NULL,
  bytes_written INTEGER NOT NULL,
  bytes         INTEGER NOT NULL,
  collective    TEXT,
  grp           TEXT,
  peer          INTEGER,
  flops         REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS spans (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  rank     INTEGER NOT NULL,
  stream   TEXT NOT NULL,
  op_index INTEGER NOT NULL,
  name     TEXT NOT NULL,
  kind     TEXT NOT NULL,
  start_ps INTEGER NOT NULL,
  end_ps   INTEGER NOT NULL,
  bytes    INTEGER NOT NULL,
  flops    REAL NOT NULL,
  source   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS links (
  run_id        INTEGER NOT NULL REFERENCES runs(run_id),
  link_id       INTEGER NOT NULL,
  src           TEXT NOT NULL,
  dst           TEXT NOT NULL,
  kind          TEXT NOT NULL,
  bandwidth_Bps REAL NOT NULL,
  latency_s     REAL NOT NULL
);
-- One collective phase's load: `bytes` on each of `links` (a JSON array of link ids,
-- ascending) over [start_ps, end_ps). The view link_usage gives one row per link.
CREATE TABLE IF NOT EXISTS link_loads (
  run_id   INTEGER NOT NULL REFERENCES runs(run_id),
  load_id  INTEGER NOT NULL,
  start_ps INTEGER NOT NULL,
  end_ps   INTEGER NOT NULL,
  bytes    REAL NOT NULL,
  links    TEXT NOT NULL,
  PRIMARY KEY (run_id, load_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS sweep_results (
  sweep       TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  point       INTEGER NOT NULL,
  settings    TEXT NOT NULL,
  status      TEXT NOT NULL CHECK (status IN ('ok', 'invalid', 'error')),
  reason      TEXT,
  objective   TEXT,
  value       REAL,
  metrics     TEXT,
  PRIMARY KEY (fingerprint, settings)
);
CREATE INDEX IF NOT EXISTS metrics_by_run ON metrics(run_id, key);
CREATE INDEX IF NOT EXISTS ranks_by_rank ON ranks(run_id, rank);
CREATE INDEX IF NOT EXISTS groups_by_id ON groups(run_id, group_id);
CREATE INDEX IF NOT EXISTS ops_by_op ON ops(run_id, program, op_index);
CREATE INDEX IF NOT EXISTS spans_by_rank_time ON spans(run_id, rank, start_ps);
CREATE INDEX IF NOT EXISTS links_by_id ON links(run_id, link_id);
CREATE VIEW IF NOT EXISTS span_view AS
  SELECT s.run_id, s.rank, s.stream, s.op_index, s.name, s.kind, o.phase, o.layer,
         o.micro_batch, s.start_ps, s.end_ps, s.end_ps - s.start_ps AS dur_ps,
         s.bytes, s.flops, s.source
  FROM spans s
  JOIN ranks r ON r.run_id = s.run_id AND r.rank = s.rank
  JOIN ops o ON o.run_id = s.run_id AND o.program = r.program AND o.op_index = s.op_index;
-- Per link and interval, utilization = bytes / (seconds x the link's bandwidth).
CREATE VIEW IF NOT EXISTS link_usage AS
  SELECT u.run_id, CAST(j.value AS INTEGER) AS link_id, u.start_ps, u.end_ps, u.bytes,
         CASE WHEN u.end_ps = u.start_ps THEN 0.0
              WHEN l.bandwidth_Bps > 0 THEN u.bytes / ((u.end_ps - u.start_ps) * 1e-12 * l.bandwidth_Bps)
         END AS utilization
  FROM link_loads u
  JOIN json_each(u.links) j
  LEFT JOIN links l ON l.run_id = u.run_id AND l.link_id = j.value;
"""


def _int(db, sql):
    return db.execute(sql).fetchone()[0]


def ensure_schema(db):
    """As sqlite_writer.cc's ensure_schema: refuses foreign files and other versions."""
    version = _int(db, "PRAGMA user_version")
    app_id = _int(db, "PRAGMA application_id")
    if version == 0:
        if _int(db, "SELECT count(*) FROM sqlite_master") != 0:
            raise RuntimeError("not a clustersim database (it has tables but no clustersim schema version)")
        _exec_script(db, SCHEMA)
        db.execute("PRAGMA user_version = %d" % SCHEMA_VERSION)
        db.execute("PRAGMA application_id = %d" % APPLICATION_ID)
        return
    if app_id != 0 and app_id != APPLICATION_ID:
        raise RuntimeError("not a clustersim database (application_id %d)" % app_id)
    if version != SCHEMA_VERSION:
        raise RuntimeError("incompatible clustersim database: schema version %d, this script writes version %d"
                           % (version, SCHEMA_VERSION))
    _exec_script(db, SCHEMA)


def _exec_script(db, script):
    # executescript() would COMMIT the open transaction; run the statements one by one.
    for stmt in script.split(";"):
        if stmt.strip():
            db.execute(stmt)


def write_run(path, run, metrics, ranks, spans):
    """Appends one run in one transaction; `complete` flips to 1 just before COMMIT.
    run: dict(name, source, kind, network_model, seed, scenario_yaml); metrics: [(key, value)];
    ranks: [(rank, node, local_gpu, device, program, mirror_of)];
    spans: [(rank, stream, op_index, name, kind, start_ps, end_ps, bytes, flops, source)]."""
    existed = os.path.exists(path)
    db = sqlite3.connect(path, isolation_level=None, timeout=30.0)
    try:
        db.execute("PRAGMA synchronous = NORMAL")
        db.execute("BEGIN IMMEDIATE")
        ensure_schema(db)
        try:
            cur = db.execute(
                "INSERT INTO runs (name, source, kind, network_model, seed, scenario_yaml, complete) "
                "VALUES (?, ?, ?, ?, ?, ?, 0)",
                (run["name"], run["source"], run["kind"], run["network_model"], int(run["seed"]),
                 run["scenario_yaml"]))
        except sqlite3.IntegrityError as e:
            raise RuntimeError("%s: this database's runs table allows no source '%s' (a clustersim-created file "
                               "allows only 'sim' and 'real'); write the PyTorch run into a fresh file"
                               % (e, run["source"]))
        run_id = cur.lastrowid
        db.executemany("INSERT INTO metrics (run_id, key, value) VALUES (?, ?, ?)",
                       [(run_id, k, None if v is None else float(v)) for k, v in metrics])
        db.executemany("INSERT INTO ranks (run_id, rank, node, local_gpu, device, program, mirror_of) "
                       "VALUES (?, ?, ?, ?, ?, ?, ?)", [(run_id,) + tuple(r) for r in ranks])
        db.executemany("INSERT INTO spans (run_id, rank, stream, op_index, name, kind, start_ps, end_ps, bytes, "
                       "flops, source) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       [(run_id,) + tuple(s) for s in spans])
        db.execute("UPDATE runs SET complete = 1 WHERE run_id = ?", (run_id,))
        db.execute("COMMIT")
        return run_id
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        db.close()
        if not existed:
            for suffix in ("", "-journal", "-wal", "-shm"):
                try:
                    os.remove(path + suffix)
                except OSError:
                    pass
        raise
    finally:
        try:
            db.close()
        except sqlite3.Error:
            pass


# ---------------------------------------------------------------------------------------
# The model.

class Rotary(nn.Module):
    def __init__(self, head_dim, seq_len, base=500000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        t = torch.arange(seq_len, dtype=torch.float32)
        f = torch.outer(t, inv)  # (s, d/2)
        emb = torch.cat([f, f], dim=-1)  # (s, d)
        self.register_buffer("cos", emb.cos()[None, None], persistent=False)
        self.register_buffer("sin", emb.sin()[None, None], persistent=False)

    def forward(self, x):  # x: (b, h, s, d)
        s = x.shape[2]
        cos = self.cos[:, :, :s].to(x.dtype)
        sin = self.sin[:, :, :s].to(x.dtype)
        x1, x2 = x.chunk(2, dim=-1)
        return x * cos + torch.cat([-x2, x1], dim=-1) * sin


def make_norm(kind, hidden, bias):
    if kind == "layernorm":
        return nn.LayerNorm(hidden, eps=1e-5, bias=bias)
    return nn.RMSNorm(hidden, eps=1e-5)


class Block(nn.Module):
    def __init__(self, cfg, rotary, gqa_mode):
        super().__init__()
        h, nh, nkv = cfg["hidden"], cfg["heads"], cfg["kv_heads"]
        self.nh, self.nkv, self.hd = nh, nkv, h // nh
        self.ffn_type = cfg["ffn_type"]
        self.gqa_mode = gqa_mode
        bias = cfg["biases"]
        self.norm1 = make_norm(cfg["norm"], h, bias)
        self.qkv = nn.Linear(h, (nh + 2 * nkv) * self.hd, bias=bias)
        self.proj = nn.Linear(nh * self.hd, h, bias=bias)
        self.norm2 = make_norm(cfg["norm"], h, bias)
        up = 2 * cfg["ffn_hidden"] if self.ffn_type == "swiglu" else cfg["ffn_hidden"]
        self.up = nn.Linear(h, up, bias=bias)
        self.down = nn.Linear(cfg["ffn_hidden"], h, bias=bias)
        self.rotary = rotary

    def forward(self, x):
        b, s, _ = x.shape
        y = self.norm1(x)
        qkv = self.qkv(y)
        q, k, v = qkv.split([self.nh * self.hd, self.nkv * self.hd, self.nkv * self.hd], dim=-1)
        q = q.view(b, s, self.nh, self.hd).transpose(1, 2)
        k = k.view(b, s, self.nkv, self.hd).transpose(1, 2)
        v = v.view(b, s, self.nkv, self.hd).transpose(1, 2)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        a = sdpa(q, k, v, self.gqa_mode)
        a = a.transpose(1, 2).reshape(b, s, self.nh * self.hd)
        x = x + self.proj(a)
        y = self.norm2(x)
        u = self.up(y)
        if self.ffn_type == "swiglu":
            gate, up = u.chunk(2, dim=-1)
            u = F.silu(gate) * up
        else:
            u = F.gelu(u, approximate="tanh")
        return x + self.down(u)


def sdpa(q, k, v, gqa_mode):
    if q.shape[1] != k.shape[1]:
        if gqa_mode == "native":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        rep = q.shape[1] // k.shape[1]
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


class Transformer(nn.Module):
    def __init__(self, cfg, gqa_mode):
        super().__init__()
        h = cfg["hidden"]
        self.embed = nn.Embedding(cfg["vocab"], h)
        self.pos = nn.Embedding(cfg["seq_len"], h) if cfg["learned_positions"] else None
        rotary = Rotary(h // cfg["heads"], cfg["seq_len"]) if cfg["rope"] else None
        self.layers = nn.ModuleList([Block(cfg, rotary, gqa_mode) for _ in range(cfg["layers"])])
        self.norm = make_norm(cfg["norm"], h, cfg["biases"])
        self.tied = cfg["tied_embeddings"]
        self.logits = None if self.tied else nn.Linear(h, cfg["vocab"], bias=False)

    def forward(self, tokens, labels):
        x = self.embed(tokens)
        if self.pos is not None:
            x = x + self.pos.weight[: tokens.shape[1]]
        for layer in self.layers:
            x = layer(x)
        x = self.norm(x)
        w = self.embed.weight if self.tied else self.logits.weight
        logits = F.linear(x, w)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1))


def init_weights(model):
    for name, p in model.named_parameters():
        if p.dim() >= 2:
            nn.init.normal_(p, mean=0.0, std=0.02)
        elif name.endswith("bias"):
            nn.init.zeros_(p)
        else:
            nn.init.ones_(p)


def choose_gqa_mode(cfg, requested):
    """native: SDPA's enable_gqa, if a backend other than the math one takes it; else repeat."""
    if cfg["kv_heads"] == cfg["heads"]:
        return "none"
    if requested != "auto":
        return requested
    hd = cfg["hidden"] // cfg["heads"]
    try:
        q = torch.randn(1, cfg["heads"], 256, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(1, cfg["kv_heads"], 256, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(1, cfg["kv_heads"], 256, hd, device="cuda", dtype=torch.bfloat16, requires_grad=True)
        with sdpa_no_math():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).sum().backward()
        torch.cuda.synchronize()
        return "native"
    except (RuntimeError, TypeError):
        return "repeat"


def sdpa_no_math():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backends = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION]
    if hasattr(SDPBackend, "CUDNN_ATTENTION"):
        backends.append(SDPBackend.CUDNN_ATTENTION)
    return sdpa_kernel(backends)


def param_counts(cfg):
    h, nh, nkv, ffn, V, L = cfg["hidden"], cfg["heads"], cfg["kv_heads"], cfg["ffn_hidden"], cfg["vocab"], cfg["layers"]
    hd = h // nh
    mats = 3 if cfg["ffn_type"] == "swiglu" else 2
    layer = h * (nh + 2 * nkv) * hd + nh * hd * h + mats * h * ffn
    return L * layer + V * h  # matrix-product weights, logits included


# ---------------------------------------------------------------------------------------
# Clock sampling (NVML through torch.cuda, where it answers).

class ClockSampler:
    def __init__(self, period_s=0.05):
        self.period_s = period_s
        self.sm, self.power = [], []
        self._stop = threading.Event()
        self._t = None
        try:
            torch.cuda.clock_rate()
            self.ok = True
        except Exception:
            self.ok = False

    def __enter__(self):
        if self.ok:
            self._t = threading.Thread(target=self._run, daemon=True)
            self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            try:
                self.sm.append(float(torch.cuda.clock_rate()))
                self.power.append(float(torch.cuda.power_draw()) / 1000.0)
            except Exception:
                return
            self._stop.wait(self.period_s)

    def __exit__(self, *exc):
        self._stop.set()
        if self._t:
            self._t.join()

    def metrics(self):
        out = []
        if self.sm:
            out += [("sm_clock_mhz", statistics.median(self.sm)), ("sm_clock_max_mhz", max(self.sm))]
        if self.power:
            out.append(("power_w", statistics.fmean(self.power)))
        return out


# ---------------------------------------------------------------------------------------
# Profiling one step.

def kernel_kind(name):
    n = name.lower()
    if any(s in n for s in ("flash", "fmha", "attention", "attn", "cudnn_generated_fort_native_sdpa")):
        return "attention"
    if any(s in n for s in ("gemm", "nvjet", "cutlass", "xmma", "cublas", "sm90_", "sm80_", "matmul")):
        return "gemm"
    return "memory"


def profile_step(step_fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step_fn()
        torch.cuda.synchronize()
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            trace = json.load(f)
    finally:
        os.remove(path)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ks = []
    for e in events:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        start_ps = int(round(float(e["ts"]) * 1e6))
        end_ps = start_ps + int(round(float(e.get("dur", 0)) * 1e6))
        stream = (e.get("args") or {}).get("stream", e.get("tid", 0))
        kind = "memory" if e["cat"] != "kernel" else kernel_kind(e["name"])
        ks.append((start_ps, end_ps, "stream%s" % stream, e["name"], kind))
    if not ks:
        return [], {}, []
    ks.sort()
    t0 = ks[0][0]
    spans = [(0, st, i, name, kind, s - t0, e - t0, 0, 0.0, "pytorch") for i, (s, e, st, name, kind) in enumerate(ks)]
    summary = {"profile_kernels": len(spans), "profile_span_s": (max(k[1] for k in ks) - t0) * 1e-12}
    for kind in ("gemm", "attention", "memory"):
        summary["profile_%s_s" % kind] = sum(e - s for s, e, _, _, k in ks if k == kind) * 1e-12
    attn_names = sorted({name for _, _, _, name, k in ks if k == "attention"})
    return spans, summary, attn_names


# ---------------------------------------------------------------------------------------
# The training run.

MODEL_KEYS = ["layers", "hidden", "heads", "kv_heads", "ffn_hidden", "ffn_type", "vocab", "seq_len", "micro_batch",
              "micro_batches"]


def resolve_config(args):
    cfg = {}
    if args.scenario_json:
        with open(args.scenario_json) as f:
            obj = json.load(f)
        if not isinstance(obj, dict):
            raise SystemExit("--scenario-json: %s holds no JSON object" % args.scenario_json)
        extra = set(obj) - set(MODEL_KEYS) - {"name", "norm", "rope", "tied_embeddings", "biases",
                                               "learned_positions", "iterations", "warmup"}
        if extra:
            raise SystemExit("--scenario-json: unknown keys %s" % sorted(extra))
        cfg.update(obj)
    for key in MODEL_KEYS + ["name", "norm", "rope", "tied_embeddings", "biases", "learned_positions", "iterations",
                             "warmup"]:
        v = getattr(args, key)
        if v is not None:
            cfg[key] = v
    missing = [k for k in MODEL_KEYS if k not in cfg and k != "micro_batches"]
    if missing:
        raise SystemExit("missing model arguments: %s (give them as options or in --scenario-json)"
                         % ", ".join("--" + k.replace("_", "-") for k in missing))
    cfg.setdefault("micro_batches", 1)
    cfg.setdefault("iterations", 10)
    cfg.setdefault("warmup", 3)
    for k in MODEL_KEYS + ["iterations", "warmup"]:
        if k != "ffn_type":
            cfg[k] = int(cfg[k])
    if cfg["ffn_type"] not in ("gelu", "swiglu"):
        raise SystemExit("ffn_type must be gelu or swiglu, got %r" % cfg["ffn_type"])
    gpt = cfg["ffn_type"] == "gelu"  # clustersim's presets: the GPT family (plan/model.cc)
    if cfg.get("norm") in (None, "auto"):
        cfg["norm"] = "layernorm" if gpt else "rmsnorm"
    if cfg["norm"] not in ("layernorm", "rmsnorm"):
        raise SystemExit("norm must be layernorm or rmsnorm, got %r" % cfg["norm"])
    for key, default in (("rope", not gpt), ("tied_embeddings", gpt), ("biases", gpt), ("learned_positions", gpt)):
        cfg[key] = bool(cfg[key]) if cfg.get(key) is not None else default
    if cfg["hidden"] % cfg["heads"] or cfg["heads"] % cfg["kv_heads"]:
        raise SystemExit("hidden must divide by heads, and heads by kv_heads")
    if cfg["micro_batches"] < 1 or cfg["iterations"] < 1 or cfg["warmup"] < 0:
        raise SystemExit("micro_batches and iterations must be >= 1, warmup >= 0")
    cfg.setdefault("name", "pytorch-%dL-h%d-s%d" % (cfg["layers"], cfg["hidden"], cfg["seq_len"]))
    return cfg


def train(args):
    cfg = resolve_config(args)
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    torch.manual_seed(args.seed)
    dev = torch.device("cuda")
    gqa_mode = choose_gqa_mode(cfg, args.gqa)
    with dev:
        model = Transformer(cfg, gqa_mode)
    init_weights(model)
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    mb, nmb, s, V = cfg["micro_batch"], cfg["micro_batches"], cfg["seq_len"], cfg["vocab"]
    data = [(torch.randint(0, V, (mb, s), device=dev), torch.randint(0, V, (mb, s), device=dev)) for _ in range(nmb)]

    def step():
        for tokens, labels in data:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(tokens, labels) / nmb
            loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach() * nmb

    ctx = sdpa_no_math() if args.no_math_sdpa else _null()
    with ctx:
        torch.cuda.reset_peak_memory_stats()
        for _ in range(cfg["warmup"]):
            step()
        torch.cuda.synchronize()
        times = []
        ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(cfg["iterations"])]
        with ClockSampler() as clocks:
            for a, b in ev:
                a.record()
                last_loss = step()
                b.record()
            torch.cuda.synchronize()
        times = [a.elapsed_time(b) / 1e3 for a, b in ev]
        peak_mem = torch.cuda.max_memory_allocated()
        spans, prof_summary, attn_names = [], {}, []
        if not args.no_profile:
            try:
                spans, prof_summary, attn_names = profile_step(step)
            except Exception as e:  # the profile is a bonus; the step times stand without it
                print("pytorch_reference: profiling failed: %s" % e, file=sys.stderr)

    iter_s = statistics.median(times)
    L, h = cfg["layers"], cfg["hidden"]
    P = param_counts(cfg)
    T = mb * nmb * s
    model_flops = 6.0 * P * T + 6.0 * L * s * h * T
    flops_noncausal = 6.0 * P * T + 12.0 * L * s * h * T
    total_params = sum(p.numel() for p in params)
    metrics = [
        ("iteration_time_s", iter_s),
        ("iterations_timed", float(len(times))),
        ("tokens_per_s", T / iter_s),
        ("tflops_per_gpu", model_flops / iter_s / 1e12),
        ("tflops_per_gpu_noncausal", flops_noncausal / iter_s / 1e12),
        ("model_flops_per_iteration", model_flops),
        ("gpus", 1.0),
        ("iteration_min_s", min(times)),
        ("iteration_mean_s", statistics.fmean(times)),
        ("params", float(total_params)),
        ("matmul_params", float(P)),
        ("peak_memory_bytes", float(peak_mem)),
        ("loss", float(last_loss.item())),
    ]
    metrics += clocks.metrics()
    metrics += sorted(prof_summary.items())
    metrics += [("iteration_%d_s" % i, t) for i, t in enumerate(times)]

    scenario = {k: cfg[k] for k in MODEL_KEYS + ["norm", "rope", "tied_embeddings", "biases", "learned_positions"]}
    scenario.update({"iterations": cfg["iterations"], "warmup": cfg["warmup"], "gqa": gqa_mode,
                     "precision": "fp32 params, autocast bf16, fused AdamW", "torch": torch.__version__,
                     "cuda": torch.version.cuda})
    device_name = torch.cuda.get_device_name()
    if args.out:
        write_run(args.out,
                  {"name": cfg["name"], "source": "pytorch", "kind": "training", "network_model": "pytorch",
                   "seed": args.seed, "scenario_yaml": json.dumps(scenario, sort_keys=True)},
                  metrics, [(0, 0, 0, device_name, 0, 0)], spans)
    summary = {"name": cfg["name"], "kind": "training", "source": "pytorch", "device": device_name,
               "torch": torch.__version__, "cuda": torch.version.cuda, "gqa": gqa_mode,
               "attention_kernels": [n[:120] for n in attn_names]}
    summary.update({k: v for k, v in metrics if not re.fullmatch(r"iteration_\d+_s", k)})
    summary["iteration_s"] = times
    print(json.dumps(summary))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# ---------------------------------------------------------------------------------------
# Micro-benchmarks.

def time_launches(fn, launches=20, warmup=5, repeats=5):
    """Per-launch seconds of `launches` back-to-back calls between two CUDA events, after
    warm-up; `repeats` such batches, returning (median, min)."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(repeats):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(launches):
            fn()
        b.record()
        torch.cuda.synchronize()
        out.append(a.elapsed_time(b) / 1e3 / launches)
    return statistics.median(out), min(out)


def microbench(path):
    dev = "cuda"
    torch.manual_seed(0)
    lines = []

    def emit(d):
        d["device"] = torch.cuda.get_device_name()
        print(json.dumps(d))
        sys.stdout.flush()
        lines.append(d)

    shapes = [(8192, 8192, 8192), (4096, 12288, 4096), (16384, 3072, 1024), (2048, 2048, 2048), (1024, 1024, 1024),
              (8192, 28672, 4096), (8192, 4096, 14336)]
    for m, n, k in shapes:
        flops = 2.0 * m * n * k
        a = torch.randn(m, k, device=dev, dtype=torch.bfloat16)
        b = torch.randn(k, n, device=dev, dtype=torch.bfloat16)
        c = torch.empty(m, n, device=dev, dtype=torch.bfloat16)
        med, best = time_launches(lambda: torch.mm(a, b, out=c))
        emit({"bench": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k, "time_s": med, "min_time_s": best,
              "tflops": flops / med / 1e12})
        try:
            a8 = a.to(torch.float8_e4m3fn)
            b8 = torch.randn(n, k, device=dev, dtype=torch.bfloat16).to(torch.float8_e4m3fn).t()  # column-major
            sa = torch.tensor(1.0, device=dev, dtype=torch.float32)
            sb = torch.tensor(1.0, device=dev, dtype=torch.float32)
            med, best = time_launches(lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb,
                                                               out_dtype=torch.bfloat16))
            emit({"bench": "gemm", "dtype": "fp8_e4m3", "m": m, "n": n, "k": k, "time_s": med, "min_time_s": best,
                  "tflops": flops / med / 1e12, "scales": "per-tensor", "out_dtype": "bf16"})
            med, best = time_launches(lambda: torch._scaled_mm(a8, b8, scale_a=sa, scale_b=sb,
                                                               out_dtype=torch.bfloat16, use_fast_accum=True))
            emit({"bench": "gemm", "dtype": "fp8_e4m3_fast_accum", "m": m, "n": n, "k": k, "time_s": med,
                  "min_time_s": best, "tflops": flops / med / 1e12, "scales": "per-tensor", "out_dtype": "bf16"})
            del a8, b8
        except Exception as e:
            emit({"bench": "gemm", "dtype": "fp8_e4m3", "m": m, "n": n, "k": k, "error": str(e)[:300]})
        del a, b, c
        torch.cuda.empty_cache()

    shape = (4, 16, 2048, 2048)
    x = torch.randn(*shape, device=dev, dtype=torch.bfloat16)
    nbytes = x.numel() * x.element_size()
    for name, fn, moved, note in (
            ("softmax", lambda: torch.softmax(x, dim=-1), 2 * nbytes, "read x + write y (bf16)"),
            ("dropout", lambda: F.dropout(x, p=0.1, training=True), 2 * nbytes,
             "read x + write y (bf16); the 1-byte mask the kernel also writes is not counted"),
    ):
        med, best = time_launches(fn)
        emit({"bench": name, "shape": list(shape), "dtype": "bf16", "time_s": med, "min_time_s": best,
              "bytes": moved, "gb_per_s": moved / med / 1e9, "note": note})
    del x
    torch.cuda.empty_cache()
    n = (1 << 30) // 2  # 1 GiB of bf16 per operand
    a = torch.randn(n, device=dev, dtype=torch.bfloat16)
    b = torch.randn(n, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    moved = 3 * (1 << 30)
    med, best = time_launches(lambda: torch.add(a, b, out=c))
    emit({"bench": "add", "elements": n, "dtype": "bf16", "time_s": med, "min_time_s": best, "bytes": moved,
          "gb_per_s": moved / med / 1e9, "note": "c = a + b, each 1 GiB: read 2 GiB + write 1 GiB"})
    # The kernel classes eager PyTorch runs between the GEMMs (the pytorch-eager model of
    # clustersim, docs/model.md): dtype-converting copies and mixed-dtype adds (the
    # dynamic-cast loop), same-dtype streaming, and the multi-tensor-apply kernels of
    # clip_grad_norm_ and fused AdamW, over 2 GiB operands and 1 G parameters.
    n = 1 << 28  # 256 M elements
    x16 = torch.randn(n, device=dev, dtype=torch.bfloat16)
    x32 = torch.randn(n, device=dev, dtype=torch.float32)
    y32 = torch.empty_like(x32)
    y16 = torch.empty_like(x16)
    for name, fn, moved, note in (
            ("cast_bf16_to_fp32", lambda: y32.copy_(x16), 6 * n, "y32.copy_(x16): read 2 + write 4 bytes per element"),
            ("cast_fp32_to_bf16", lambda: y16.copy_(x32), 6 * n, "y16.copy_(x32): read 4 + write 2"),
            ("add_fp32_bf16", lambda: torch.add(x32, x16, out=y32), 10 * n, "fp32 + bf16 -> fp32: read 6 + write 4"),
            ("add_fp32_fp32", lambda: torch.add(x32, y32, out=y32), 12 * n, "fp32 + fp32 -> fp32: read 8 + write 4"),
            ("gelu_bf16", lambda: torch.nn.functional.gelu(x16, approximate="tanh"), 4 * n, "read 2 + write 2"),
    ):
        med, best = time_launches(fn, launches=10)
        emit({"bench": name, "elements": n, "time_s": med, "min_time_s": best, "bytes": moved,
              "gb_per_s": moved / med / 1e9, "note": note})
    del x16, x32, y32, y16
    torch.cuda.empty_cache()
    params = [torch.nn.Parameter(torch.randn(1 << 24, device=dev)) for _ in range(64)]  # 1 G FP32 parameters
    for p_ in params:
        p_.grad = torch.randn_like(p_)
    opt = torch.optim.AdamW(params, lr=1e-4, fused=True)
    opt.step()
    count = sum(p_.numel() for p_ in params)
    med, best = time_launches(opt.step, launches=3, warmup=2, repeats=3)
    emit({"bench": "fused_adamw_fp32", "params": count, "time_s": med, "min_time_s": best, "bytes": 28 * count,
          "gb_per_s": 28 * count / med / 1e9, "note": "read param, grad, exp_avg, exp_avg_sq; write param and moments"})
    med, best = time_launches(lambda: torch.nn.utils.clip_grad_norm_(params, 1.0), launches=3, warmup=2, repeats=3)
    emit({"bench": "clip_grad_norm_fp32", "params": count, "time_s": med, "min_time_s": best, "bytes": 12 * count,
          "gb_per_s": 12 * count / med / 1e9, "note": "foreach norm (read 4) + foreach mul_ (read 4, write 4)"})
    del params, opt
    torch.cuda.empty_cache()
    if path:
        with open(path, "w") as f:
            for d in lines:
                f.write(json.dumps(d) + "\n")


def attention_table(path):
    """Times causal SDPA forward and backward (BF16, is_causal=True, enable_gqa=True) on
    the calibration grid of clustersim's own attention kernel (real_backend/microbench.h:
    head dims 64 and 128, lengths 256 ... 8192, batch x heads 8 ... 128 from the group size
    up, GQA groups 1, 4, 8, 16), one sequence of `bh` query heads and bh/g K/V heads.
    The forward is the SDPA call; the backward is torch.autograd.grad of its output, which
    runs every kernel the backend's backward needs (cuDNN: the dO.O row dot, the bprop,
    the dQ conversion). Between runs 192 MiB stream through L2 as in the real backend's
    calibration, so K/V are read from HBM. Each call is timed queued behind a spin kernel
    (its kernels' time on the GPU, as a step that runs ahead of its host sees it) and, for
    the JSON lines only, unqueued (with the GPU waiting on the host's dispatch, as the rows
    were timed before 2026-12-06). Writes the rows as a profile's
    compute.attention_table (YAML) with the backend named in `attention_backend`."""
    dev = "cuda"
    torch.manual_seed(0)
    flush = torch.empty(96 << 20, device=dev, dtype=torch.uint8)
    flush2 = torch.empty_like(flush)

    def timed(fn, warmup=3, reps=9, queued=True):
        # The events time the GPU between them. With queued (the table's rows) a spin kernel
        # holds the GPU while the host dispatches the call, so the interval is the kernels'
        # own time and their gaps on the GPU, as in a training step whose host runs ahead;
        # without it the interval also holds the GPU waiting for the host's dispatch
        # (tens of microseconds an SDPA call, more for autograd.grad's backward).
        for _ in range(warmup):
            fn()
        ts = []
        for _ in range(reps):
            flush2.copy_(flush)
            if queued:
                torch.cuda._sleep(SPIN_CYCLES)
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            torch.cuda.synchronize()
            ts.append(a.elapsed_time(b) / 1e3)
        return statistics.median(ts)

    def kernels_of(fn):
        from torch.profiler import profile, ProfilerActivity
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sorted({e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA})

    rows, names = [], {}
    for d in (64, 128):
        for g in (1, 4, 8, 16):
            bh = max(8, g)
            while bh <= 128:
                for s_len in (256, 512, 1024, 2048, 4096, 8192):
                    q = torch.randn(1, bh, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    k = torch.randn(1, bh // g, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    v = torch.randn(1, bh // g, s_len, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=g > 1)
                    with sdpa_no_math():
                        out = fwd()
                        dout = torch.randn_like(out)
                        tf = timed(lambda: fwd())
                        tb = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True))
                        tf_host = timed(lambda: fwd(), queued=False)
                        tb_host = timed(lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True),
                                        queued=False)
                        if (d, g) not in names and s_len == 2048:
                            names[(d, g)] = kernels_of(lambda: torch.autograd.grad(fwd(), (q, k, v), dout))
                    flops = 4.0 * bh * s_len * s_len * d / 2
                    print(json.dumps({"bench": "sdpa", "head_dim": d, "group": g, "batch_heads": bh, "seq": s_len,
                                      "forward_s": tf, "backward_s": tb, "forward_tflops": flops / tf / 1e12,
                                      "backward_tflops": 2.5 * flops / tb / 1e12,
                                      "forward_unqueued_s": tf_host, "backward_unqueued_s": tb_host}))
                    sys.stdout.flush()
                    rows.append(("forward", d, s_len, bh, tf, g))
                    rows.append(("backward", d, s_len, bh, tb, g))
                    del q, k, v, out, dout
                bh *= 2
    torch.cuda.empty_cache()
    kernels = sorted({n for v in names.values() for n in v if "sdpa" in n.lower() or "flash" in n.lower()
                      or "fmha" in n.lower() or "attention" in n.lower()})
    backend = ("cudnn" if any("cudnn" in n for n in kernels) else
               "flash" if any("flash" in n for n in kernels) else
               "efficient" if any("fmha" in n for n in kernels) else "unknown")
    lines = [
        "# PyTorch scaled_dot_product_attention (causal, BF16, enable_gqa) timed by",
        "# calibrate/pytorch_reference.py --attention-table on %s." % torch.cuda.get_device_name(),
        "# Kernels seen: " + "; ".join(k[:100] for k in kernels),
        "# A calibration profile fragment: `clustersim calibrate --attention-from FILE` takes",
        "# these rows in place of measuring its own kernel.",
        "gpu: \"%s\"" % torch.cuda.get_device_name(),
        "compute:",
        "  attention_backend: \"pytorch-sdpa %s (torch %s, cuDNN %s)\"" % (
            backend, torch.__version__, torch.backends.cudnn.version()),
        "  attention_table:  # [phase, head_dim, causal, seq, batch_heads, seconds, gqa_group]",
    ]
    for phase, d, s_len, bh, t, g in rows:
        lines.append("    - [%s, %d, true, %d, %d, %r, %d]" % (phase, d, s_len, bh, t, g))
    text = "\n".join(lines) + "\n"
    if path:
        with open(path, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


# ---------------------------------------------------------------------------------------

def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int)
    p.add_argument("--hidden", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", dest="kv_heads", type=int)
    p.add_argument("--ffn-hidden", dest="ffn_hidden", type=int)
    p.add_argument("--ffn-type", dest="ffn_type", choices=["gelu", "swiglu"])
    p.add_argument("--vocab", type=int)
    p.add_argument("--seq-len", dest="seq_len", type=int)
    p.add_argument("--micro-batch", dest="micro_batch", type=int)
    p.add_argument("--micro-batches", dest="micro_batches", type=int, help="gradient accumulation steps (default 1)")
    p.add_argument("--iterations", type=int, help="timed steps (default 10)")
    p.add_argument("--warmup", type=int, help="untimed steps first (default 3)")
    p.add_argument("--out", help="SQLite database to append the run to")
    p.add_argument("--name", help="run name (default from the shape)")
    p.add_argument("--scenario-json", dest="scenario_json", help="JSON object with the model arguments")
    p.add_argument("--norm", choices=["auto", "layernorm", "rmsnorm"], help="default: layernorm for gelu, rmsnorm "
                   "for swiglu")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--rope", dest="rope", action="store_true", default=None, help="rotary (default for swiglu)")
    g.add_argument("--no-rope", dest="rope", action="store_false")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--tied", dest="tied_embeddings", action="store_true", default=None,
                   help="logits share the embedding (default for gelu)")
    g.add_argument("--untied", dest="tied_embeddings", action="store_false")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--biases", dest="biases", action="store_true", default=None, help="default for gelu")
    g.add_argument("--no-biases", dest="biases", action="store_false")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--learned-positions", dest="learned_positions", action="store_true", default=None,
                   help="a learned position table (default for gelu)")
    g.add_argument("--no-learned-positions", dest="learned_positions", action="store_false")
    p.add_argument("--gqa", choices=["auto", "native", "repeat"], default="auto",
                   help="GQA in SDPA: enable_gqa=True (native) or K/V repeated (auto: native where a non-math "
                        "backend takes it)")
    p.add_argument("--allow-math-sdpa", dest="no_math_sdpa", action="store_false", default=True,
                   help="let SDPA fall back to its math backend (by default only flash/efficient/cuDNN run)")
    p.add_argument("--no-profile", action="store_true", help="skip the torch.profiler step (no spans)")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--microbench", metavar="OUT.jsonl", nargs="?", const="",
                   help="run the GEMM / softmax / dropout / add micro-benchmarks instead (JSON lines)")
    p.add_argument("--attention-table", dest="attention_table", metavar="OUT.yaml", nargs="?", const="",
                   help="time causal SDPA forward/backward on the calibration grid instead and write the rows "
                        "as a profile's compute.attention_table")
    args = p.parse_args(argv)
    if args.attention_table is not None:
        attention_table(args.attention_table)
    elif args.microbench is not None:
        microbench(args.microbench)
    else:
        train(args)


if __name__ == "__main__":
    main()
