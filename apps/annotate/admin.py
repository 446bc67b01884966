"""Django admin for debates and the expert queue.

Debates and their turns are records (imported or held by the oracle): read-only here. Queue items
and expert verdicts can be inspected and, for operators, corrected. The admin escapes every text
it shows, so the agents' reasoning is displayed as plain text.
"""

from __future__ import annotations

from django.contrib import admin

from .models import Debate, DebateTurn, ExpertVerdict, QueueItem


class ReadOnlyMixin:
    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False


class DebateTurnInline(ReadOnlyMixin, admin.TabularInline):
    model = DebateTurn
    fields = ("round", "speaker", "agent", "verdict", "unparseable", "recorded_score", "swapped", "reasoning")
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Debate)
class DebateAdmin(ReadOnlyMixin, admin.ModelAdmin):
    list_display = ("key", "source", "scenario", "criterion", "system_1", "system_2", "consensus", "rounds",
                    "created_at")
    list_filter = ("source", "criterion", "scenario", "rounds")
    search_fields = ("key", "question")
    inlines = [DebateTurnInline]


class ExpertVerdictInline(admin.TabularInline):
    model = ExpertVerdict
    fields = ("expert", "verdict", "note", "created_at")
    raw_id_fields = ("expert",)
    extra = 0


@admin.register(QueueItem)
class QueueItemAdmin(admin.ModelAdmin):
    list_display = ("id", "debate", "status", "claimed_by", "claim_expires_at", "required_verdicts", "created_at",
                    "resolved_at")
    list_filter = ("status", "debate__source", "debate__criterion")
    search_fields = ("debate__key",)
    list_select_related = ("debate", "claimed_by")
    raw_id_fields = ("debate", "claimed_by")
    inlines = [ExpertVerdictInline]


@admin.register(ExpertVerdict)
class ExpertVerdictAdmin(admin.ModelAdmin):
    list_display = ("item", "expert", "verdict", "created_at")
    list_filter = ("verdict",)
    raw_id_fields = ("item", "expert")
