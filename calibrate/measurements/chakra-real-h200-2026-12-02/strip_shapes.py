#!/usr/bin/env python3
"""Copies a Chakra trace without clustersim's kernel-shape attributes, so that its compute
nodes carry only what other tools record (num_ops, tensor_size, a duration): the form a
foreign trace takes. Usage: strip_shapes.py IN.et OUT.et"""
import sys

SHAPE = {b"dtype", b"shape_m", b"shape_n", b"shape_k", b"shape_batch", b"bytes_read", b"bytes_written",
         b"mem_access", b"flops", b"heads", b"kv_heads", b"q_len", b"kv_len", b"head_dim", b"causal"}


def varint(b, i):
    v = s = 0
    while True:
        c = b[i]; i += 1
        v |= (c & 0x7F) << s; s += 7
        if c < 0x80:
            return v, i


def enc(v):
    out = bytearray()
    while True:
        c = v & 0x7F; v >>= 7
        out.append(c | (0x80 if v else 0))
        if not v:
            return bytes(out)


def fields(m):
    i = 0
    while i < len(m):
        start = i
        key, i = varint(m, i)
        t = key & 7
        if t == 0:
            _, i = varint(m, i)
        elif t == 1:
            i += 8
        elif t == 5:
            i += 4
        elif t == 2:
            n, i = varint(m, i)
            i += n
        else:
            raise ValueError("wire type %d" % t)
        yield key >> 3, t, m[start:i]


def attr_name(raw):
    # raw: the whole field 10 (key, length, AttributeProto); the name is its field 1.
    _, i = varint(raw, 0)
    n, i = varint(raw, i)
    for num, t, f in fields(raw[i:i + n]):
        if num == 1 and t == 2:
            _, j = varint(f, 0)
            ln, j = varint(f, j)
            return f[j:j + ln]
    return b""


data = open(sys.argv[1], "rb").read()
out = bytearray()
i = 0
first = True
while i < len(data):
    n, i = varint(data, i)
    msg = data[i:i + n]; i += n
    if not first:
        msg = b"".join(raw for num, t, raw in fields(msg) if not (num == 10 and attr_name(raw) in SHAPE))
    first = False
    out += enc(len(msg)) + msg
open(sys.argv[2], "wb").write(out)
