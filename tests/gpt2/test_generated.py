#!/usr/bin/env python3
"""tests/gpt2/gpt2_tp.shd and gpt2_zero.shd are what gen_tp.py and
gen_zero.py make from dsl-examples/gpt2.shd."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
rc = 0
for gen in ("gen_tp.py", "gen_zero.py"):
    rc |= subprocess.call([sys.executable, os.path.join(here, gen), "--check"])
sys.exit(rc)
