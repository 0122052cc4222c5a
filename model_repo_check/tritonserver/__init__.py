"""The real tritonserver on this machine's CPU (server.py), the local process handling it and the
serving lab's other servers share (processes.py), and the Python onnxruntime backend it loads
(backends/). See model_repo_check/tritonserver/README.md."""
