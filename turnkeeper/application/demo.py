"""The demo world (DESIGN.md section 11), built only through the application services.

People Alex, Sam and Robin (Robin owns everything); agents Lotse, Texter and Assistent;
spaces Support, Marketing and Research with their channels, behaviours and grants.
`turnkeeper demo-world` prints it as JSON; the tests build it the same way.
"""

from __future__ import annotations

import uuid

import attrs

from turnkeeper.application.bootstrap import Services
from turnkeeper.application.services.admin import NewPrincipal
from turnkeeper.domain.world import (
    BillingMode,
    Channel,
    ChannelType,
    Level,
    OperatorMode,
    Principal,
    PrincipalKind,
    ResourceKind,
    Space,
)


@attrs.frozen(kw_only=True)
class DemoWorld:
    """Handles to everything in the demo world.

    Attributes:
        owner: Robin, the owner, with a token.
        people: alex, sam, robin by handle (with tokens).
        agents: lotse, texter, assistent by handle (with tokens).
        spaces: support, marketing, research by lower-case name.
        channels: allgemein, eskalation, reports, bulletin, kampagnen, ideas, notizen.
    """

    owner: NewPrincipal
    people: dict[str, NewPrincipal]
    agents: dict[str, NewPrincipal]
    spaces: dict[str, Space]
    channels: dict[str, Channel]

    def principal(self, handle: str) -> Principal:
        """A person or agent of the world by handle."""
        found = self.people.get(handle) or self.agents[handle]
        return found.principal

    def to_json(self) -> dict[str, object]:
        """The document `turnkeeper demo-world` prints (ids and tokens)."""

        def entry(p: NewPrincipal) -> dict[str, str]:
            return {"id": str(p.principal.id), "token": p.token}

        return {
            "owner": entry(self.owner),
            "people": {h: entry(p) for h, p in self.people.items()},
            "agents": {h: entry(p) for h, p in self.agents.items()},
            "spaces": {n: {"id": str(s.id)} for n, s in self.spaces.items()},
            "channels": {
                n: {
                    "id": str(c.id),
                    **({"main_thread_id": str(c.main_thread_id)} if c.main_thread_id else {}),
                }
                for n, c in self.channels.items()
            },
        }


async def build_demo_world(services: Services, owner: NewPrincipal | None = None) -> DemoWorld:
    """Create the demo world.

    Args:
        services: the services to build it through.
        owner: an existing owner to act as Robin; when None, Robin is created as owner
            (the unit fails if another owner exists, which `ensure_owner` prevents).

    Returns:
        The world with every id and token.
    """
    admin = services.admin
    if owner is None:
        created = await admin.ensure_owner("robin", None)
        if created is None:
            raise RuntimeError("an owner exists already: pass it as owner")
        owner = created
    robin = owner.principal
    people = {"robin": owner}
    for handle in ("alex", "sam"):
        people[handle] = await admin.create_principal(
            robin, kind=PrincipalKind.PERSON, handle=handle, display_name=handle.title()
        )
    agents = {
        "lotse": await admin.create_principal(robin, kind=PrincipalKind.AGENT, handle="lotse"),
        "texter": await admin.create_principal(robin, kind=PrincipalKind.AGENT, handle="texter"),
        "assistent": await admin.create_principal(
            robin,
            kind=PrincipalKind.AGENT,
            handle="assistent",
            billing_mode=BillingMode.PERSONAL,
            holder_id=robin.id,
        ),
    }

    def agent(handle: str) -> uuid.UUID:
        return agents[handle].principal.id

    spaces = {
        "support": await admin.create_space(
            robin, name="Support", default_operator_id=agent("lotse")
        ),
        "marketing": await admin.create_space(
            robin, name="Marketing", default_operator_id=agent("texter")
        ),
        "research": await admin.create_space(
            robin, name="Research", default_operator_id=agent("assistent")
        ),
    }
    support, marketing, research = (spaces[n].id for n in ("support", "marketing", "research"))
    channels = {
        "allgemein": await admin.create_channel(
            robin, support, name="Allgemein", type=ChannelType.TEXT
        ),
        "eskalation": await admin.create_channel(
            robin, support, name="Eskalation", type=ChannelType.TEXT
        ),
        "reports": await admin.create_channel(
            robin, support, name="Reports", type=ChannelType.FORUM, operator_mode=OperatorMode.NONE
        ),
        "bulletin": await admin.create_channel(
            robin, support, name="Bulletin", type=ChannelType.FORUM
        ),
        "kampagnen": await admin.create_channel(
            robin, marketing, name="Kampagnen", type=ChannelType.TEXT
        ),
        "ideas": await admin.create_channel(robin, marketing, name="Ideas", type=ChannelType.FORUM),
        "notizen": await admin.create_channel(
            robin, research, name="Notizen", type=ChannelType.TEXT
        ),
    }
    channels["allgemein"] = await admin.set_behavior(
        robin, channels["allgemein"].id, free_response=True, allow_mentioned_agents=True
    )
    channels["eskalation"] = await admin.set_behavior(
        robin, channels["eskalation"].id, thread_require_mention=True, allow_mentioned_agents=True
    )
    grants = [
        (agent("lotse"), ResourceKind.CHANNEL, channels["reports"].id, Level.WRITE),
        (people["alex"].principal.id, ResourceKind.SPACE, support, Level.TRIGGER),
        (people["sam"].principal.id, ResourceKind.SPACE, marketing, Level.TRIGGER),
        (people["sam"].principal.id, ResourceKind.CHANNEL, channels["allgemein"].id, Level.READ),
        (agent("texter"), ResourceKind.CHANNEL, channels["allgemein"].id, Level.WRITE),
    ]
    for principal_id, kind, resource_id, level in grants:
        await admin.create_grant(
            robin,
            principal_id=principal_id,
            resource_kind=kind,
            resource_id=resource_id,
            level=level,
        )
    return DemoWorld(owner=owner, people=people, agents=agents, spaces=spaces, channels=channels)
