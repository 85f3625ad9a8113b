"""Configs that `streamlearn deploy k8s` is tested with (tests/unit/test_k8s_install.py
for what each install holds, tests/integration/test_k8s_manifests.py for its validity)."""

# Two models: `demo` with both doors, and `Room_2` (a name Kubernetes does not take) with a
# factory's model and two variants, one of them also named as Kubernetes would not.
TWO_MODELS = """
[models.demo]
inputs = 4
[models.demo.actor]
http_port = 8000
http_host = "0.0.0.0"
grpc_port = 8001
grpc_host = "0.0.0.0"

[models.Room_2]
inputs = 3
factory = "mymodels:build"
[models.Room_2.variants.fast]
learning_rate = 0.01
[models.Room_2.variants.Wide_1]
hidden = [128]
"""
