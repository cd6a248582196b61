#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_checkpoint: small version-2 shard files (layout in
executor/include/trainplan/executor/checkpoint.hpp) and damaged copies. Each seed starts with
the harness's mode byte (odd: the harness rewrites the header's file size and checksum).

    python3 fuzz/make_checkpoint_seeds.py fuzz/corpus/checkpoint
    python3 fuzz/make_checkpoint_seeds.py --check build/.../rank-00000.bin   # XXH64 self-check
"""
import os
import struct
import sys

P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)
M = (1 << 64) - 1


def rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & M


def rnd(acc, lane):
    return (rotl((acc + lane * P2) & M, 31) * P1) & M


def merge(acc, v):
    return ((acc ^ rnd(0, v)) * P1 + P4) & M


def xxh64(data, seed=0):
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M, (seed + P2) & M, seed, (seed - P1) & M]
        while i + 32 <= n:
            for k in range(4):
                v[k] = rnd(v[k], struct.unpack_from("<Q", data, i + 8 * k)[0])
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M
        for k in range(4):
            h = merge(h, v[k])
    else:
        h = (seed + P5) & M
    h = (h + n) & M
    while i + 8 <= n:
        h = ((rotl(h ^ rnd(0, struct.unpack_from("<Q", data, i)[0]), 27) * P1) + P4) & M
        i += 8
    if i + 4 <= n:
        h = ((rotl(h ^ (struct.unpack_from("<I", data, i)[0] * P1 & M), 23) * P2) + P3) & M
        i += 4
    while i < n:
        h = (rotl(h ^ (data[i] * P5 & M), 11) * P1) & M
        i += 1
    h ^= h >> 33
    h = (h * P2) & M
    h ^= h >> 29
    h = (h * P3) & M
    h ^= h >> 32
    return h


def shard(rank, world, steps, updates, tensors):
    body = b""
    for name, dtype, payload, elem in tensors:
        rec = struct.pack("<I", len(name)) + name + bytes([dtype]) + struct.pack("<q", len(payload) // elem) + payload
        body += rec + struct.pack("<Q", xxh64(rec))
    size = 56 + len(body)
    head = b"TPCKPT02" + struct.pack("<IIqqIIQ", rank, world, steps, updates, len(tensors), 0, size)
    return head + struct.pack("<Q", xxh64(head)) + body


def main():
    if sys.argv[1] == "--check":
        data = open(sys.argv[2], "rb").read()
        assert struct.unpack_from("<Q", data, 48)[0] == xxh64(data[:48]), "xxh64 differs from libxxhash"
        print("header checksum matches libxxhash")
        return
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    f32 = struct.pack("<4f", 0.5, -1.25, 3.0, 1e-3)
    seeds = {
        "ok-one-tensor": shard(0, 1, 3, 3, [(b"fc1.weight:value", 0, f32, 4)]),
        "ok-three-kinds": shard(1, 2, 10, 9, [(b"ln.weight:value", 0, f32[:8], 4), (b"ln.weight:adam_m", 0, f32[:8], 4),
                                             (b"ln.weight:adam_v", 1, struct.pack("<2d", 1e-8, 2.0), 8)]),
        "ok-empty-tensor": shard(0, 4, 0, 0, [(b"shard:value", 0, b"", 4), (b"bf16:value", 2, b"\x80\x3f", 2)]),
        "ok-no-tensors": shard(0, 1, 0, 0, []),
    }
    good = seeds["ok-one-tensor"]
    flipped = bytearray(good)
    flipped[-10] ^= 0x20
    seeds["bad-flipped-data"] = bytes(flipped)
    bad_dtype = bytearray(good)
    bad_dtype[56 + 4 + len(b"fc1.weight:value")] = 0x7F
    seeds["bad-dtype"] = bytes(bad_dtype)
    seeds["bad-truncated"] = good[:-5]
    seeds["bad-version"] = b"TPCKPT01" + good[8:]
    for name, data in seeds.items():
        for mode in (0, 1):  # as written, and with the harness fixing the header
            with open(os.path.join(out, f"{name}-{mode}"), "wb") as f:
                f.write(bytes([mode]) + data)


if __name__ == "__main__":
    main()
