"""Django admin for accounts and the model registry.

Role flags are read-only in forms: they change only through the actions below, which queue the
matching on-chain grantRole/revokeRole in the same transaction (apps/chat/roles.py). Models are
read-mostly: their public details are pinned on IPFS and announced on-chain, so they change
through the registry (a new metadata CID), never by editing a row here.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import OuterRef, Subquery
from django.utils.html import format_html_join

from apps.chain.models import OutboxItem, Registration
from apps.chain import outbox
from apps.chain.outbox import ROLE_CODES, InvalidCall

from . import moderation, roles
from .models import Invitation, Profile, RegisteredModel

ROLE_NAMES = {code: name for name, code in ROLE_CODES.items()}


def _role_action(role: str, grant: bool):
    change = roles.grant_role if grant else roles.revoke_role

    def action(modeladmin, request, queryset):
        changed, unchanged, errors = 0, 0, []
        for profile in queryset.select_related("user"):
            try:
                item = change(profile, role)
            except InvalidCall as exc:  # RoleError included; nothing changed for this account
                errors.append(f"{profile.user}: {exc}")
                continue
            if item is None:
                unchanged += 1
            else:
                changed += 1
        if changed:
            modeladmin.message_user(
                request, f"{'Granted' if grant else 'Revoked'} the {role} role for {changed} account(s); "
                         f"the on-chain {'grantRole' if grant else 'revokeRole'} is queued.", messages.SUCCESS)
        if unchanged:
            modeladmin.message_user(
                request, f"{unchanged} account(s) {'already had' if grant else 'did not have'} the {role} role: "
                         f"nothing queued.", messages.INFO)
        for error in errors:
            modeladmin.message_user(request, error, messages.ERROR)

    action.__name__ = f"{'grant' if grant else 'revoke'}_{role}"
    return admin.action(description=f"{'Grant' if grant else 'Revoke'} the {role} role (on-chain too)",
                        permissions=["change"])(action)


def _each(name: str, description: str, change, done: str, already: str):
    """An admin action applying `change(obj)` (True: changed) to each selected row."""
    def action(modeladmin, request, queryset):
        results = [change(obj) for obj in queryset]
        if any(results):
            modeladmin.message_user(request, f"{done}: {sum(results)}.", messages.SUCCESS)
        if not all(results):
            modeladmin.message_user(request, f"{already}: {results.count(False)}.", messages.INFO)
    action.__name__ = name
    return admin.action(description=description, permissions=["change"])(action)


@admin.register(Profile)
class ProfileAdmin(admin.ModelAdmin):
    list_display = ("user", "address", "is_developer", "is_expert", "is_service", "suspended_at", "onchain")
    list_filter = ("is_developer", "is_expert", "is_service")
    search_fields = ("user__username", "address")
    list_select_related = ("user",)
    fields = ("user", "address", "is_developer", "is_expert", "is_service", "same_person_as", "suspended_at",
              "suspension_reason", "onchain", "role_history", "created_at")
    # Only the link between one person's accounts is edited here; the rest changes through actions.
    readonly_fields = tuple(f for f in fields if f != "same_person_as")
    raw_id_fields = ("same_person_as",)
    actions = [
        _role_action("developer", grant=True),
        _role_action("expert", grant=True),
        _role_action("developer", grant=False),
        _role_action("expert", grant=False),
        _each("suspend_account", "Suspend the account (no login; unsent ratings dropped; USER_ROLE revoked on-chain)",
              lambda p: moderation.suspend_account(p.user, "suspended by an admin"),
              "Suspended, with the on-chain revokeRole queued", "Already suspended"),
        _each("reinstate_account", "Lift the suspension (USER_ROLE granted back on-chain)", lambda p: moderation.reinstate_account(p.user),
              "Reinstated, with the on-chain grantRole queued", "Not suspended"),
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(
            chain_role=Subquery(Registration.objects.filter(address=OuterRef("address")).values("role")[:1]),
            register_status=Subquery(OutboxItem.objects.filter(
                key=outbox.key_expression("register", OuterRef("address"))).values("status")[:1]))

    def has_add_permission(self, request):
        return False  # accounts come from sign-up: a key, a profile and a queued registration

    @admin.display(description="on-chain registration")
    def onchain(self, obj: Profile) -> str:
        role = getattr(obj, "chain_role", None)
        if role is not None:
            return f"registered ({ROLE_NAMES.get(role, role)})"
        status = getattr(obj, "register_status", None)
        if status == OutboxItem.Status.CONFIRMED:
            return "registered, not indexed yet"
        return f"register {status}" if status else "not registered"

    @admin.display(description="role calls (grantRole / revokeRole)")
    def role_history(self, obj: Profile):
        items = [item for role in roles.ROLE_FLAGS for item in roles.role_calls(role, obj.address)]
        if not items:
            return "none"
        items.sort(key=lambda i: i.id)
        return format_html_join("", "<div>{} — {}{}</div>", (
            (i.key, i.status, f": {i.last_error}" if i.last_error else "") for i in items))


@admin.register(RegisteredModel)
class RegisteredModelAdmin(admin.ModelAdmin):
    list_display = ("name", "owner", "kind", "running", "suspended_at", "metadata_cid", "model_id")
    list_filter = ("kind", "enabled", "healthy", "is_judge")
    actions = [
        _each("suspend_model", "Suspend the model (offline whatever its owner does)",
              lambda m: moderation.suspend_model(m, "suspended by the site's operator"), "Suspended", "Already suspended"),
        _each("lift_model_suspension", "Lift the model's suspension", moderation.lift_model_suspension, "Lifted", "Not suspended"),
    ]
    search_fields = ("name", "model_id", "metadata_cid", "owner__username")
    list_select_related = ("owner",)
    # The encrypted API key is never shown; public details change through the registry only.
    exclude = ("api_key_encrypted",)
    readonly_fields = ("owner", "name", "provider", "description", "licence", "parameters", "kind",
                       "endpoint_url", "endpoint_model", "contexts", "model_id", "metadata_cid",
                       "metadata_revision", "suspended_at", "suspension_reason", "healthy", "health_failures", "health_checked_at", "health_error",
                       "created_at", "updated_at")

    @admin.display(boolean=True)
    def running(self, obj: RegisteredModel) -> bool:
        return obj.running

    def has_add_permission(self, request):
        return False  # registration pins metadata on IPFS and queues addModel: use /models/new

    def has_delete_permission(self, request, obj=None):
        return False  # the model is on-chain; take it offline instead (enabled)


@admin.register(Invitation)
class InvitationAdmin(admin.ModelAdmin):
    """Invitations for LLMCHAIN_SIGNUP=invite: add one, hand its code (or sign-up link) to the person."""

    list_display = ("code", "note", "created_by", "created_at", "expires_at", "used_by", "used_at")
    search_fields = ("code", "note", "used_by__username")
    fields = ("note", "expires_at", "code", "signup_link", "created_by", "created_at", "used_by", "used_at")
    readonly_fields = ("code", "signup_link", "created_by", "created_at", "used_by", "used_at")

    def save_model(self, request, obj, form, change):
        if not change:
            obj.created_by = request.user
        super().save_model(request, obj, form, change)

    @admin.display(description="sign-up link")
    def signup_link(self, obj: Invitation) -> str:
        from django.urls import reverse
        return f"{reverse('signup')}?invitation={obj.code}" if obj.code else "(saved first)"
