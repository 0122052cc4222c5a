"""The HTTP gateway in front of Triton: business JSON in, tensors over gRPC, business JSON out.
`python -m serving.gateway --help`; serving/gateway/README.md says how it behaves."""
