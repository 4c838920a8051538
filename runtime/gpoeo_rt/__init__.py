"""gpoeo_rt: the slim gpoeo runtime that tunes GPU clocks online while a training job runs.

Depends only on numpy, onnxruntime, nvidia-ml-py and typer. Layers, each talking only to the one below:
device -> sampling -> detection -> profiling -> prediction -> search/policy -> controller -> CLI.
"""

__version__ = "0.1.0"
