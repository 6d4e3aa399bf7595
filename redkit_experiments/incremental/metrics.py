"""The continual-learning metrics, pure functions of what was measured after every step.

    accuracy[t][j]  accuracy on step j's test queries after step t (j <= t), no domain id given
    seen[t]         accuracy on the test queries of every step <= t together (what class-incremental reports)

    final_accuracy                seen[T]
    average_incremental_accuracy  mean over t of seen[t]                                 (Rebuffi et al. 2017)
    forgetting                    mean over j < T of max_{t < T} accuracy[t][j] - accuracy[T][j]  (Chaudhry et al. 2018)
    backward_transfer             mean over j < T of accuracy[T][j] - accuracy[j][j]      (Lopez-Paz & Ranzato 2017)

T is the last step. With one step, forgetting and backward transfer are 0 (nothing came before). A step
with no test query has None for its accuracies and is left out of forgetting and backward transfer.
"""


def continual_metrics(accuracy: list[list[float]], seen: list[float]) -> dict[str, float]:
    last = len(accuracy) - 1
    if last < 0 or len(seen) != len(accuracy):
        raise ValueError("one row of accuracies and one seen-accuracy per step")
    for t, row in enumerate(accuracy):
        if len(row) != t + 1:
            raise ValueError(f"step {t}: {len(row)} accuracies, expected {t + 1} (every step seen so far)")
    earlier = [j for j in range(last) if accuracy[last][j] is not None]
    return {
        "final_accuracy": seen[last],
        "average_incremental_accuracy": sum(seen) / len(seen),
        "forgetting": (
            sum(max(accuracy[t][j] for t in range(j, last)) - accuracy[last][j] for j in earlier) / len(earlier)
            if earlier
            else 0.0
        ),
        "backward_transfer": (
            sum(accuracy[last][j] - accuracy[j][j] for j in earlier) / len(earlier) if earlier else 0.0
        ),
    }
