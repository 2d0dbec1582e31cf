#!/bin/bash
# One GPU: python3 routed_rows.py (about two minutes).
cd "$(dirname "$0")" && python3 routed_rows.py | tee "${OUT:-.}/routed_rows.jsonl"
