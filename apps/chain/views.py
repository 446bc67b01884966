"""Evidence by CID: a page for people, JSON for programs, the raw bytes for verifiers."""

from __future__ import annotations

from django.http import HttpResponse
from django.shortcuts import render
from rest_framework.decorators import api_view, permission_classes
from rest_framework.permissions import AllowAny
from rest_framework.response import Response

from lib import records
from lib.cid import CidError, normalize

from .evidence import EvidenceCorrupt, EvidenceMissing, default_store
from .health import chain_health
from .ipfs import IpfsError
from .models import LedgerModel
from .signals import model_names


class _Failure(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


def load_evidence(cid: str) -> tuple[str, bytes]:
    """(normalized CID, verified bytes), or a _Failure with the HTTP status to answer."""
    try:
        cid = normalize(cid)
    except CidError as exc:
        raise _Failure(400, str(exc)) from exc
    try:
        return cid, default_store().get(cid, timeout=5)
    except EvidenceMissing as exc:
        raise _Failure(404, f"No store holds {cid}. {exc}") from exc
    except EvidenceCorrupt as exc:
        raise _Failure(502, f"The stored bytes do not match {cid}; they were refused. {exc}") from exc
    except IpfsError as exc:
        raise _Failure(503, f"The IPFS node could not be asked for {cid}: {exc}") from exc


def describe(cid: str, data: bytes) -> dict:
    """What a blob is: a known record (parsed), plain text, or opaque bytes."""
    info = {"cid": cid, "size": len(data), "schema": None, "record": None, "text": None, "problem": ""}
    try:
        record = records.parse(data)
    except records.RecordError as exc:
        info["problem"] = str(exc)
        try:
            info["text"] = data.decode("utf-8")
        except UnicodeDecodeError:
            pass
    else:
        info["schema"] = record["schema"]
        info["record"] = record
    return info


def evidence_page(request, cid):
    try:
        cid, data = load_evidence(cid)
    except _Failure as failure:
        return render(request, "chain/evidence_error.html", {"cid": cid, "message": failure.message},
                      status=failure.status)
    info = describe(cid, data)
    model_ids = set()
    if info["schema"] == records.EVIDENCE_SCHEMA:
        rec = info["record"]
        model_ids = {rec["answer"]["model"], *(r["model"] for r in rec["references"])}
    cids = dict(LedgerModel.objects.filter(model_id__in=model_ids).values_list("model_id", "metadata_cid"))
    return render(request, "chain/evidence.html", {"info": info, "metadata_cids": cids,
                                                   "names": model_names(model_ids),
                                                   "hex_preview": data[:64].hex() if info["text"] is None else ""})


def evidence_raw(request, cid):
    try:
        cid, data = load_evidence(cid)
    except _Failure as failure:
        return HttpResponse(failure.message, status=failure.status, content_type="text/plain; charset=utf-8")
    response = HttpResponse(data, content_type="application/octet-stream")
    response["Content-Disposition"] = f'attachment; filename="{cid}"'
    response["X-Content-Type-Options"] = "nosniff"
    response["Cache-Control"] = "public, max-age=31536000, immutable"  # content-addressed
    return response


@api_view(["GET"])
@permission_classes([AllowAny])
def evidence_api(request, cid):
    """A blob by CID, verified: its schema and parsed record, or its text when it is not a record."""
    try:
        cid, data = load_evidence(cid)
    except _Failure as failure:
        return Response({"detail": failure.message}, status=failure.status)
    return Response(describe(cid, data))


def chain_status(request):
    """How far behind the chain's head the boards are, or that the chain is unreachable (a fragment
    the boards load and refresh: the boards themselves are cached by version, this line is not)."""
    response = render(request, "chain/_status.html", {"health": chain_health()})
    response["Cache-Control"] = "no-store"
    return response
