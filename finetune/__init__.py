"""Fine-tuning rounds: SFT/DPO datasets from the experience bank, LoRA training, adapter registry, gate, scheduler."""
