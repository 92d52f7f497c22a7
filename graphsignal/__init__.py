"""graphsignal: a GPU profiler for AI agents. See README.md and SKILL.md."""
__version__ = "0.1.0"
