"""Export a trained acoustic model to ONNX or TorchScript, and run the exported file (onnxruntime / torch.jit)."""
