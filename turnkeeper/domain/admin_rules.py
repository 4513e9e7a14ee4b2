"""The body rules of the owner's use cases: principals, spaces, channels and operators.

Each validator returns every offending member as a `FieldError` (pointers relative to the
request body; an empty list when the request is fine), so that a use case collects the
errors of all its validators and raises one `ValidationFailed` through
`turnkeeper.domain.errors.reject_invalid`. The rules that need stored facts (a taken
handle, an unknown holder or operator) are checked in the unit of work afterwards.
"""

from __future__ import annotations

import uuid

from turnkeeper.domain.errors import FieldError, character_errors
from turnkeeper.domain.text import is_blank, words
from turnkeeper.domain.world import BillingMode, OperatorMode, PrincipalKind


def principal_errors(
    *,
    kind: PrincipalKind,
    handle: str,
    billing_mode: BillingMode | None,
    holder_id: uuid.UUID | None,
    supports_followups: bool | None,
    max_handle_length: int,
) -> list[FieldError]:
    """The rules of a new principal (POST /v1/principals).

    Args:
        kind: person or agent (app is reserved).
        handle: the unique handle, one word.
        billing_mode: agents only; personal needs a holder.
        holder_id: agents only: the holding person of a personal agent.
        supports_followups: agents only.
        max_handle_length: ``principal.max_handle_length`` (characters).

    Returns:
        ``/kind`` invalid_enum for app; ``/handle`` invalid (empty or not one word),
        invalid_character (a NUL) or too_long; ``/billing_mode``, ``/holder_id`` and
        ``/supports_followups``
        agents_only for a person that sets them; ``/holder_id`` personal_needs_holder
        when an agent's billing mode and holder disagree.
    """
    errors: list[FieldError] = []
    if kind is PrincipalKind.APP:
        errors.append(FieldError(pointer="/kind", code="invalid_enum"))
    if len(words(handle)) != 1:
        errors.append(FieldError(pointer="/handle", code="invalid"))
    elif nul := character_errors({"/handle": handle}):
        errors.extend(nul)
    elif len(handle) > max_handle_length:
        # The handle is a key of a unique index, whose rows have a size limit.
        errors.append(FieldError(pointer="/handle", code="too_long"))
    if kind is PrincipalKind.PERSON:
        agent_only = {
            "/billing_mode": billing_mode,
            "/holder_id": holder_id,
            "/supports_followups": supports_followups,
        }
        errors.extend(
            FieldError(pointer=pointer, code="agents_only")
            for pointer, value in agent_only.items()
            if value is not None
        )
    elif kind is PrincipalKind.AGENT:
        personal = (billing_mode or BillingMode.ORGANIZATION) is BillingMode.PERSONAL
        if personal != (holder_id is not None):
            errors.append(FieldError(pointer="/holder_id", code="personal_needs_holder"))
    return errors


def name_errors(name: str, pointer: str = "/name") -> list[FieldError]:
    """The rule of a space's or channel's name: not blank, no NUL.

    Args:
        name: the name.
        pointer: its member.

    Returns:
        ``required`` at `pointer` for a blank name, ``invalid_character`` for a NUL.
    """
    if is_blank(name):
        return [FieldError(pointer=pointer, code="required")]
    return character_errors({pointer: name})


def operator_errors(
    mode: OperatorMode, operator_id: uuid.UUID | None, pointer: str = "/operator_id"
) -> list[FieldError]:
    """The rule of a channel's operator: an operator id exactly in mode agent.

    Args:
        mode: inherit, agent or none.
        operator_id: the operator agent, if any.
        pointer: the member of the operator id.

    Returns:
        ``operator_mode_mismatch`` at `pointer` when mode and id disagree.
    """
    if (mode is OperatorMode.AGENT) != (operator_id is not None):
        return [FieldError(pointer=pointer, code="operator_mode_mismatch")]
    return []


__all__ = ["name_errors", "operator_errors", "principal_errors"]
