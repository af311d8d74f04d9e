"""Vision-language-action policies: dataset pre-flight checks, LoRA fine-tuning, sim evaluation and the runner."""
