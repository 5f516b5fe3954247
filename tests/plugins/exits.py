"""A plugin that exits the interpreter while it loads (must be one clear line, exit 2)."""
import sys

sys.exit(3)
