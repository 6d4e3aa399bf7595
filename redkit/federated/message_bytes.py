"""What a Flower message weighs: the bytes every federation method's ledger counts (RED's round, SecAgg+'s
stages, FedAvg's rounds), one function for all of them."""

from flwr.app import ArrayRecord, RecordDict


def content_bytes(content: RecordDict) -> int:
    """What a message's records weigh: arrays' data and keys (Flower's own ArrayRecord.count_bytes), config and
    metric values as Flower counts them (8 bytes a number, 1 a bool, a string's or bytes' length, and keys), here
    also where a value is empty (SecAgg+'s legacy replies carry "", which Flower 1.42's count_bytes refuses)."""
    return sum(
        record.count_bytes()
        if isinstance(record, ArrayRecord)
        else sum(len(k) + _value_bytes(v) for k, v in record.items())
        for record in content.values()
    )


def _value_bytes(value) -> int:
    if isinstance(value, list):
        return sum(_value_bytes(v) for v in value)
    if isinstance(value, str | bytes):
        return len(value)
    return 1 if isinstance(value, bool) else 8
