#!/usr/bin/env python3
"""The generated gradient-check tests are what gen_gradcheck.py makes today."""
import os
import subprocess
import sys

here = os.path.dirname(os.path.abspath(__file__))
sys.exit(subprocess.call([sys.executable, os.path.join(here, "gen_gradcheck.py"), "--check"]))
