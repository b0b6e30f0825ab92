"""Data: manifests, audio, features, text, augmentation, samplers, and the demo corpus."""
