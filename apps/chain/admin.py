"""Read-only views of the outbox and the signed transactions: the submitter owns these rows."""

from __future__ import annotations

from django.contrib import admin

from .models import ChainTransaction, OutboxItem, Sender


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


@admin.register(OutboxItem)
class OutboxItemAdmin(ReadOnlyAdmin):
    list_display = ("id", "key", "function", "sender_address", "status", "depends_on_id", "transaction",
                    "attempts", "duplicate", "failure", "last_error", "created_at", "confirmed_at")
    list_filter = ("status", "function", "failure", "duplicate")
    search_fields = ("key", "sender_address")
    list_select_related = ("transaction",)
    ordering = ("-id",)


@admin.register(ChainTransaction)
class ChainTransactionAdmin(ReadOnlyAdmin):
    list_display = ("id", "function", "sender", "nonce", "tx_hash", "status", "succeeded", "gas_limit", "gas_used",
                    "block_number", "attempts", "resends", "next_send_at", "created_at", "mined_at", "final_at")
    list_filter = ("status", "function")
    search_fields = ("tx_hash", "sender__address")
    list_select_related = ("sender",)
    exclude = ("raw",)  # the signed bytes: nothing to read there
    ordering = ("-id",)


@admin.register(Sender)
class SenderAdmin(ReadOnlyAdmin):
    """The nonce lanes, and why one cannot progress (the submitter says it here, once, not per pass)."""

    list_display = ("address", "next_nonce", "stuck_reason", "stuck_since", "lease_owner", "lease_until")
    list_filter = (("stuck_since", admin.EmptyFieldListFilter),)
    search_fields = ("address",)
    ordering = ("address",)
