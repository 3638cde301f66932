#!/usr/bin/env python3
"""tests/gpt2/gpt2_tp.shd is what gen_tp.py makes from dsl-examples/gpt2.shd."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(subprocess.call([sys.executable, os.path.join(here, "gen_tp.py"), "--check"]))
