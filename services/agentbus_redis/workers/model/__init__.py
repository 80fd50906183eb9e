"""The model call: the model worker and the fake Anthropic-compatible server it is tested against."""
