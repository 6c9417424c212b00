"""One module per upstream family; each exports UPSTREAMS (see conformance/upstream.py)."""
