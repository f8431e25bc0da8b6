from seedrl.rollout.backends import Generation, HFBackend, SamplingParams, make_backend
from seedrl.rollout.runner import RolloutSettings, rollout
from seedrl.rollout.types import StepSample, Trajectory

__all__ = ["Generation", "HFBackend", "SamplingParams", "make_backend", "RolloutSettings", "rollout",
           "StepSample", "Trajectory"]
