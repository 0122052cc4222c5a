"""The serving layer's runtime code: the HTTP gateway in front of Triton (serving.gateway) and
the drift agent (serving.drift). See serving/README.md."""
