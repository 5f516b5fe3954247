"""A plugin file that fails while loading."""
from harness import register

raise ImportError("this plugin needs a package that is not installed")
