from seedrl.models.loading import TINY_CONFIGS, load_model, load_tokenizer, save_model

__all__ = ["TINY_CONFIGS", "load_model", "load_tokenizer", "save_model"]
