#!/usr/bin/env python3
"""The generated reshard pair tests are what gen_pairs.py makes today."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(subprocess.call([sys.executable, os.path.join(here, "gen_pairs.py"), "--check"]))
