"""Serving a trained model: `redkit serve` over HTTP, from a bundle's serving graph.

    predictor.py   BundlePredictor: the graph under ONNX Runtime, the tokenizer through `tokenizers`
    batching.py    dynamic batching: one model thread, whole requests per batch
    state.py       the served predictor, swapped whole when a domain is added or removed
    lifecycle.py   add or remove a domain at serving time (the library's life cycle, then a new graph)
    schema.py errors.py middleware.py metrics.py admin.py app.py    the FastAPI app
    main.py        `redkit serve`: uvicorn, one process or N workers, or Ray Serve replicas
    testing.py     a real server in a thread, on a free port (tests, fuzzing, benchmarks)

The serving path imports numpy, onnxruntime, tokenizers, FastAPI and uvicorn (`pip install
'redkit[serve]'`), never torch, transformers or scikit-learn; only adding or removing a domain does.

The graph itself is part of the bundle: `redkit export` writes it (redkit/bundle/graph.py).
"""
