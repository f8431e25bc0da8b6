"""seedrl: reinforcement learning for multi-turn LLM agents (GRPO, SEED and siblings in one loop)."""

__version__ = "0.1.0"
