"""Real data, end to end: low-confidence handwritten-digit predictions go to human review.

What an ML team would write around Signoff, on scikit-learn's bundled digits set (1,797
8×8 images, no download):

1. **Score.** Train a logistic regression (the model) and a k-nearest-neighbours
   classifier (its fallback) on 75 % of the images. For every test image, ask the model;
   when it is unsure (top class probability below ``--threshold``) ask the fallback too.
   A prediction neither of them is sure about is *escalated*. The predictions, with the
   real times they were made, are written once to a scoring log (``--scores``); a
   re-run re-sends exactly the same escalations from it, as a producer retrying after
   a crash would.
2. **Escalate** each unsure prediction through ``POST /tasks/escalate``: the pixels as
   ``input_snapshot``, both attempts as ``attempted_actions``, confidence and threshold as
   ``evaluator_verdict``, the precheck hash (SHA-256 of the RFC 8785 form of the
   attempts), and ids derived from the sample, so a re-run creates nothing twice.
3. **Review.** ``--reviewers`` operators claim with ``POST /tasks/claim-next``
   concurrently (one thread each) and resolve with the true label: ``APPROVED`` when the
   automated answer was right, ``REJECTED`` with the corrected label otherwise. The
   label is always in ``resolution_payload.label``.
4. **Report** counts, accuracy before and after human review, and one audit trail.

Run it against a Signoff you started (``signoff serve`` prints the admin key)::

    pip install -e '.[examples]'
    SIGNOFF_URL=http://127.0.0.1:8000 SIGNOFF_ADMIN_KEY=signoff_... \\
        python examples/digits_triage.py

It creates its own producer and reviewer keys with the admin key (``POST /api-keys``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import threading
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
import rfc8785

ENTITY_TYPE = "digit_sample"
REASON_CODE = "LOW_CONFIDENCE"
PRODUCER = "digits-triage-bot"
#: uuid5 namespace for escalation ids: the same sample always gets the same id.
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://scikit-learn.org/digits-triage")


@dataclass
class Prediction:
    """One scored test image. ``index`` is its row in ``load_digits()``; ``pixels`` the
    8×8 grey levels (0–16); confidences are top class probabilities (0–1); times are
    RFC 3339 UTC. ``fallback_*`` are ``None`` when the model was sure."""

    index: int
    true_label: int
    pixels: list[list[int]]
    model_label: int
    model_confidence: float
    model_at: str
    fallback_label: int | None
    fallback_confidence: float | None
    fallback_at: str | None
    threshold: float

    @property
    def label(self) -> int:
        """The automated answer: the fallback's when it was consulted."""
        return self.model_label if self.fallback_label is None else self.fallback_label

    @property
    def confidence(self) -> float:
        return (
            self.model_confidence if self.fallback_confidence is None else self.fallback_confidence
        )

    @property
    def escalate(self) -> bool:
        return self.confidence < self.threshold


def rfc3339_now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


# --- 1. score ---------------------------------------------------------------------------


def score(threshold: float) -> list[Prediction]:
    """Train both classifiers and score every test image (deterministic split)."""
    import numpy as np
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.utils import Bunch

    digits = cast(Bunch, load_digits())  # the dataset itself (not return_X_y's tuple)
    train, test = train_test_split(
        np.arange(len(digits.target)), test_size=0.25, random_state=0, stratify=digits.target
    )
    x, y = digits.data, digits.target
    model = LogisticRegression(max_iter=2000).fit(x[train] / 16, y[train])
    fallback = KNeighborsClassifier(n_neighbors=7).fit(x[train], y[train])

    predictions = []
    for index in sorted(int(i) for i in test):
        image = x[index : index + 1]
        model_at = rfc3339_now()
        probabilities = model.predict_proba(image / 16)[0]
        prediction = Prediction(
            index=index,
            true_label=int(y[index]),
            pixels=digits.images[index].astype(int).tolist(),
            model_label=int(probabilities.argmax()),
            model_confidence=round(float(probabilities.max()), 4),
            model_at=model_at,
            fallback_label=None,
            fallback_confidence=None,
            fallback_at=None,
            threshold=threshold,
        )
        if prediction.model_confidence < threshold:
            prediction.fallback_at = rfc3339_now()
            votes = fallback.predict_proba(image)[0]
            prediction.fallback_label = int(votes.argmax())
            prediction.fallback_confidence = round(float(votes.max()), 4)
        predictions.append(prediction)
    return predictions


def load_or_score(path: Path, threshold: float) -> tuple[list[Prediction], bool]:
    """The scoring log at ``path`` if there is one for this threshold, else a fresh
    scoring written there. Returns the predictions and whether they were reused."""
    if path.exists():
        log = json.loads(path.read_text())
        if log["threshold"] == threshold:
            return [Prediction(**p) for p in log["predictions"]], True
    predictions = score(threshold)
    path.write_text(
        json.dumps({"threshold": threshold, "predictions": [asdict(p) for p in predictions]})
    )
    return predictions, False


# --- 2. escalate ------------------------------------------------------------------------


def precheck_hash(attempted_actions: list[dict[str, Any]]) -> str:
    """SHA-256 (hex) of the RFC 8785 canonical JSON of the attempted actions."""
    return hashlib.sha256(rfc8785.dumps(attempted_actions)).hexdigest()


def escalation_body(p: Prediction) -> dict[str, Any]:
    """The escalation for one unsure prediction. Every field derives from the scoring
    log, so the same sample always produces the same bytes."""
    actions: list[dict[str, Any]] = [
        {
            "action": "predict:logistic_regression",
            "executed_at": p.model_at,
            "result": f"label {p.model_label} with confidence {p.model_confidence}",
        }
    ]
    if p.fallback_label is not None:
        actions.append(
            {
                "action": "predict:knn_fallback",
                "executed_at": p.fallback_at,
                "result": f"label {p.fallback_label} with confidence {p.fallback_confidence}",
            }
        )
    pixel_digest = hashlib.sha256(rfc8785.dumps(p.pixels)).hexdigest()
    return {
        "escalation_id": str(uuid.uuid5(NAMESPACE, f"digits/{p.index}")),
        "idempotency_key": f"digits-{p.index:04d}-{pixel_digest[:16]}",
        "entity_type": ENTITY_TYPE,
        "entity_id": str(p.index),
        "reason_code": REASON_CODE,
        "precheck_hash": precheck_hash(actions),
        "diagnostic_bundle": {
            "trace_id": f"digits-triage-{p.index:04d}",
            "attempted_actions": actions,
            "input_snapshot": {"dataset": "sklearn.datasets.load_digits", "pixels": p.pixels},
            "evaluator_verdict": {
                "confidence_score": p.confidence,
                "threshold": p.threshold,
                "label": p.label,
            },
        },
    }


def escalate_all(producer: httpx.Client, unsure: list[Prediction]) -> tuple[Counter[str], str]:
    """Escalate every unsure prediction. Returns outcome counts (``new``, ``replayed``,
    ``existing`` for a 409 naming the same task, or an ``error_code``) and one task id."""
    outcomes: Counter[str] = Counter()
    first_id = ""
    for p in unsure:
        body = escalation_body(p)
        response = producer.post("/tasks/escalate", json=body)
        if response.status_code == 201:
            replayed = response.headers.get("Idempotent-Replayed") == "true"
            outcomes["replayed" if replayed else "new"] += 1
        elif (
            response.status_code == 409 and response.json().get("task_id") == body["escalation_id"]
        ):
            outcomes["existing"] += 1  # idempotency window over; the task is still there
        else:
            outcomes[response.json().get("error_code", str(response.status_code))] += 1
            print(f"  refused sample {p.index}: {response.text}", file=sys.stderr)
        first_id = first_id or body["escalation_id"]
    return outcomes, first_id


# --- 3. review --------------------------------------------------------------------------


def review(
    client: httpx.Client, labels: dict[str, int], decisions: Counter[str], lock: threading.Lock
) -> None:
    """One operator: claim the next digit, look at it (the dataset's label stands in for
    the human's eyes), resolve, until the queue is empty."""
    while True:
        claimed = client.post(
            "/tasks/claim-next", json={"entity_type": ENTITY_TYPE, "reason_code": REASON_CODE}
        )
        if claimed.status_code == 204:
            return
        claimed.raise_for_status()
        task = claimed.json()
        truth = labels[task["entity_id"]]
        automated = task["diagnostic_bundle"]["evaluator_verdict"]["label"]
        resolution: dict[str, Any] = (
            {"decision": "APPROVED", "resolution_payload": {"label": truth}}
            if automated == truth
            else {
                "decision": "REJECTED",
                "notes": f"the image shows {truth}, not {automated}",
                "resolution_payload": {"label": truth, "corrected_from": automated},
            }
        )
        resolved = client.post(
            f"/tasks/{task['id']}/resolve",
            headers={"X-Lease-Token": task["lease_token"]},
            json=resolution,
        )
        resolved.raise_for_status()
        with lock:
            decisions[resolution["decision"]] += 1
            decisions[task["claimed_by"]] += 1


def review_all(clients: list[httpx.Client], labels: dict[str, int]) -> Counter[str]:
    decisions: Counter[str] = Counter()
    lock = threading.Lock()
    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        for future in [pool.submit(review, c, labels, decisions, lock) for c in clients]:
            future.result()
    return decisions


# --- 4. report --------------------------------------------------------------------------


def reviewed_labels(producer: httpx.Client, unsure: list[Prediction]) -> dict[int, int]:
    """The human label of every escalated sample that has been resolved, read back from
    Signoff (so a re-run reports the decisions recorded by the first)."""
    labels = {}
    for p in unsure:
        task = producer.get(f"/tasks/{escalation_body(p)['escalation_id']}").json()
        if task.get("status") == "RESOLVED":
            labels[p.index] = int(task["resolution_payload"]["label"])
    return labels


def new_key(admin: httpx.Client, role: str, principal_id: str) -> httpx.Client:
    created = admin.post("/api-keys", json={"role": role, "principal_id": principal_id})
    created.raise_for_status()
    headers = {"Authorization": f"Bearer {created.json()['key']}"}
    return httpx.Client(base_url=str(admin.base_url), headers=headers, timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000"))
    parser.add_argument("--admin-key", default=os.environ.get("SIGNOFF_ADMIN_KEY"))
    parser.add_argument("--threshold", type=float, default=0.9, help="confidence, 0–1")
    parser.add_argument("--reviewers", type=int, default=4)
    parser.add_argument("--scores", type=Path, default=Path("digits_scores.json"))
    args = parser.parse_args(argv)
    if not args.admin_key:
        parser.error("give --admin-key or set SIGNOFF_ADMIN_KEY")

    predictions, reused = load_or_score(args.scores, args.threshold)
    unsure = [p for p in predictions if p.escalate]
    consulted = sum(p.fallback_label is not None for p in predictions)
    source = f"reused {args.scores}" if reused else f"fresh, logged to {args.scores}"
    print(
        f"scored {len(predictions)} test digits ({source}):"
        f" fallback consulted {consulted} times, {len(unsure)} below threshold {args.threshold}"
    )

    admin_headers = {"Authorization": f"Bearer {args.admin_key}"}
    with httpx.Client(base_url=args.url, headers=admin_headers, timeout=30) as admin:
        producer = new_key(admin, "producer", PRODUCER)
        reviewers = [
            new_key(admin, "reviewer", f"digits-reviewer-{n}") for n in range(1, args.reviewers + 1)
        ]
    outcomes, example_id = escalate_all(producer, unsure)
    refused = sum(n for k, n in outcomes.items() if k not in ("new", "replayed", "existing"))
    print(
        f"escalated: {outcomes['new']} new, {outcomes['replayed']} deduplicated"
        f" (idempotent replay), {outcomes['existing']} already existed, {refused} refused"
    )

    labels = {str(p.index): p.true_label for p in predictions}
    decisions = review_all(reviewers, labels)
    resolved = decisions["APPROVED"] + decisions["REJECTED"]
    print(
        f"resolved: {resolved} by {len(reviewers)} concurrent reviewers"
        f" (APPROVED {decisions['APPROVED']}, REJECTED {decisions['REJECTED']})"
    )
    for n in range(1, len(reviewers) + 1):
        print(f"  digits-reviewer-{n}: {decisions[f'digits-reviewer-{n}']}")

    human = reviewed_labels(producer, unsure)
    before = sum(p.label == p.true_label for p in predictions) / len(predictions)
    after = sum(human.get(p.index, p.label) == p.true_label for p in predictions) / len(predictions)
    print(
        f"accuracy on {len(predictions)} test digits: model {before:.1%},"
        f" after human review {after:.1%} ({len(human)} reviewed)"
    )

    if example_id:
        print(f"audit trail of task {example_id}:")
        for event in producer.get(f"/tasks/{example_id}/events").json()["items"]:
            print(
                f"  v{event['version']} {event['created_at']} {event['type']:<14}"
                f" {event['actor_role']:<8} {event['actor_id']:<18} {json.dumps(event['details'])}"
            )
    for client in [producer, *reviewers]:
        client.close()
    return 0 if refused == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
