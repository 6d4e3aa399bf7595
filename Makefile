# Two entry points, each creating (once) and reusing the local virtual environment .venv:
#   make demo   reproduce Task 1 at full scale on the embedded backbone (about 10 minutes on 2 CPU cores)
#   make test   lint (ruff check), check the formatting (ruff format --check) and run the test suite (with the
#               optional peft, serve and federated extras, so the peers, serving and Flower tests run too)
VENV ?= .venv
PYTHON ?= python3
# A CPU build of torch where one is at hand; override, e.g. `make TORCH=torch==2.13.0+cu126 ...`.
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
# The original authors' published add/sub records (evaluated on, never trained on) where present.
EVAL ?= data/red-original/add_operands_2_50.jsonl
EVAL_EXTERNAL := $(if $(wildcard $(EVAL)),--eval $(EVAL))

.PHONY: demo test clean-runs

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "$(TORCH)"
	$(BIN)/python -m pip install --quiet -e ".[dev,peft,serve,federated]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/redkit reproduce task1 --out runs/task1 $(EVAL_EXTERNAL)

test: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 --dist loadfile

clean-runs:
	rm -rf runs
