"""Hindsight skills (SEED): analysis prompts, skill parsing, skill injection, analyzers.

Skills exist only during training: the student, evaluation and deployed prompts never carry one.
"""
