"""Votes in the console: a task with an approval rule shows where its rule stands, who
voted what, and — to a person who may vote now — the vote form (with the edit form of the
one-person decide form when its producer declared fields ``editable``). Votes, edits
included, go through the same service as the API's
(:func:`signoff.services.votes.vote`); no lease is taken."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from signoff.console import edit_form, wording
from signoff.console.headline_words import edit_tail, vote_tail
from signoff.console.shared import Notice, read_form, service_context
from signoff.domain.approval_rules import (
    ApprovalRule,
    Progress,
    Vote,
    progress,
    rule_from_json,
    votes_from_json,
)
from signoff.domain.decisions import parse_decision, rule_for
from signoff.domain.params import whole_number
from signoff.domain.states import REVIEWERS, Decision, TaskStatus
from signoff.domain.tasks import Principal, Task, ballot_refusal
from signoff.errors import SignoffError
from signoff.services import votes as vote_service


def rule_text(rule: ApprovalRule) -> str:
    """The rule in one or two sentences, for people."""
    parts = []
    for index, stage in enumerate(rule.stages):
        groups = " and ".join(f"{n} from {g}" for g, n in stage.groups)
        text = f"{stage.approvals} approval{'s' if stage.approvals != 1 else ''}"
        if groups:
            text += f" ({groups})"
        if len(rule.stages) > 1:
            text = f"stage {index + 1}, {stage.name}: {text}"
        parts.append(text)
    sentence = "Needs " + ", then ".join(parts) + "."
    sentence += (
        " A rejection or a revision request ends it."
        if rule.veto
        else " A rejection counts as one vote against."
    )
    return sentence


def deciding_votes(
    rule: ApprovalRule, votes: list[Vote], principal: Principal, task: Task
) -> dict[str, str]:
    """For each decision, what the confirmation adds when this person's vote of it would
    decide the task now (it completes the quorum, or a veto ends it)."""
    stage = progress(rule, votes).stage
    decides = {}
    for decision in Decision:
        # An edit voids every vote so far and is the first approval of the edit.
        edits = rule_for(decision).edits_subject
        ballot = Vote(
            voter=principal.principal_id,
            key_id=str(principal.key_id),
            groups=principal.groups,
            decision=Decision.APPROVED if edits else decision,
            notes=None,
            revision=task.current_revision,
            digest=task.digest,
            stage=progress(rule, []).stage if edits else stage,
            at=task.updated_at,
            door="console",
        )
        standing = [ballot] if edits else [*votes, ballot]
        decided = progress(rule, standing).outcome is not None
        if edits:
            decides[decision.value] = edit_tail(len(votes), task.current_revision, decided)
        else:
            decides[decision.value] = vote_tail(decision, decided)
    return decides


def veto_note(rule: ApprovalRule, standing: Progress, principal: Principal) -> str | None:
    """Said beside the vote form to someone whose rejection would not end the vote: only
    the people a stage names (a member of one of its groups) may veto it."""
    stage = rule.stages[standing.stage]
    if not rule.veto or stage.may_veto(principal.groups):
        return None
    groups = " or ".join(stage.group_names)
    return (
        f"A rejection or revision request from you is recorded and shown as a vote against, "
        f"but does not end the vote: at this stage only {groups} can."
    )


def voting_values(request: Request, task: Task, principal: Principal) -> dict[str, Any] | None:
    """What the task page shows of a task's approval rule (``None``: it has none)."""
    if task.approval_rule is None:
        return None
    rule = rule_from_json(task.approval_rule)
    votes = votes_from_json(task.votes)
    why_not: str | None = None
    standing = progress(rule, votes)
    if task.status is not TaskStatus.PENDING_REVIEW:
        why_not = None
    elif principal.role not in REVIEWERS:
        why_not = "Only reviewers and supervisors vote."
    else:
        # What a vote by this person would be told, before they type anything: the
        # decision rules (the producer's principal) and the approval rule.
        refusal = ballot_refusal(
            task,
            principal,
            Decision.APPROVED,
            task.current_revision,
            task.digest,
            standing.stage + 1,
        )
        if refusal is not None:
            why_not = wording.refusal_text(refusal)
    return {
        "tails": deciding_votes(rule, votes, principal, task),
        "progress": standing,
        "veto_note": veto_note(rule, standing, principal),
        "rule_text": rule_text(rule),
        "votes": votes,
        "verbs": {v.decision: rule_for(v.decision).verb for v in votes},
        "can_vote": task.status is TaskStatus.PENDING_REVIEW and why_not is None,
        "why_not": why_not,
        "kept_notes": getattr(request.state, "vote_notes", ""),
    }


async def cast(request: Request, principal: Principal, task_id: str) -> list[Notice]:
    """The vote form's submission: recorded, or refused in words with the notes kept."""
    form = await read_form(request)
    notes = str(form.get("notes") or "")
    request.state.vote_notes = notes
    context = service_context(request)
    try:
        revision = whole_number(form.get("revision"), field="revision")
        decision = parse_decision(form.get("decision"))
        subject = None
        if rule_for(decision).edits_subject and revision is not None:
            subject = await edit_form.edited(context, principal, task_id, revision, form)
        ballot = await vote_service.vote(
            context,
            principal,
            task_id,
            decision=decision,
            notes=notes,
            revision=revision,
            digest=str(form.get("digest") or "") or None,
            door="console",
            stage=whole_number(form.get("stage"), field="stage"),
            subject=subject,
        )
    except SignoffError as error:
        edit_form.keep_refused(request, form, error)
        return [Notice(wording.refusal_text(error), "error", error)]
    request.state.vote_notes = ""
    task = ballot.task
    standing = progress(rule_from_json(task.approval_rule or {}), votes_from_json(task.votes))
    tone = "ok" if ballot.receipt.counted or not ballot.receipt.recorded else "warn"
    text = f"{ballot.receipt.text()} {standing.text()}."
    if subject is not None:
        text = f"Your edit is revision {task.current_revision}, by you. {text}"
    return [Notice(text, tone)]
