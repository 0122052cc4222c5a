"""The serving stack: typed stack config, Kubernetes object builders, Pulumi components, renderer."""
