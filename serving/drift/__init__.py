"""The drift agent: pulls the drift features the gateway samples (GET /v1/samples/<model>), keeps
a bounded live window per model and compares it with the reference window shipped with the model
release (model_repository/<model>/drift_reference.csv) using Evidently's drift tests; serves the
result as Prometheus metrics named model_drift_*. See serving/drift/README.md."""
