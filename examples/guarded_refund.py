"""A function that must not run before a person approves the call: a refund.

    SIGNOFF_URL=http://127.0.0.1:8000 SIGNOFF_API_KEY=<producer key> \\
        python examples/guarded_refund.py c-17 50

The call escalates its arguments (the reviewer sees ``customer`` and ``amount_eur``),
waits for the decision, and on approval runs once, through the execution gate. Run it
again with the same arguments: it prints the stored result and refunds nothing twice.
A rejection or a revision request exits 1 with the reviewer's notes.
"""

from __future__ import annotations

import argparse
import os
import sys

from signoff.client import DecisionTimeout, NotApproved, Signoff, requires_approval


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("customer")
    parser.add_argument("amount_eur", type=int)
    parser.add_argument("--timeout", type=float, default=3600)
    args = parser.parse_args()
    url = os.environ.get("SIGNOFF_URL", "http://127.0.0.1:8000")
    key = os.environ.get("SIGNOFF_API_KEY", "")
    if not key:
        parser.error("a producer key is needed in SIGNOFF_API_KEY")

    with Signoff(url, key) as client:

        @requires_approval(client, reason="REFUND_REVIEW", timeout=args.timeout)
        def refund(customer: str, amount_eur: int) -> dict[str, object]:
            print(f"refunding {amount_eur} EUR to {customer}", flush=True)
            return {"customer": customer, "refunded_eur": amount_eur}

        try:
            result = refund(args.customer, args.amount_eur)
        except NotApproved as refused:
            print(f"not approved: {refused.task.decision or refused.task.status}: "
                  f"{refused.task.notes or ''}")  # fmt: skip
            return 1
        except DecisionTimeout:
            print("no decision yet: run again to keep waiting")
            return 2
    print(f"done: {result}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
