"""Data readers of the library: CLINC150 as its authors published it (clinc150.py). Your own
labelled text (JSONL/CSV) is read by redkit/fitting (records.py, data.py)."""
