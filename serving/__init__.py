"""The serving layer's runtime code: the HTTP gateway in front of Triton (serving.gateway), the
drift agent (serving.drift) and the release runbook (serving.runbook). See serving/README.md."""
