"""Prediction layer: model bundles (ONNX + manifest) and one onnxruntime call for the whole clock grid."""
