"""One HTTP status table for both REST surfaces (issue 29: it was written twice and
disagreed); each surface's row keeps the code its own tests pin."""

from __future__ import annotations

import pytest

from avatar_sdk.errors import SURFACES, ErrorCode, Surface, code_for_status


@pytest.mark.parametrize("surface", list(Surface))
@pytest.mark.parametrize(
    ("status", "code"),
    [
        (401, ErrorCode.AUTH_FAILED),
        (403, ErrorCode.AUTH_FAILED),
        (429, ErrorCode.CAPACITY_UNAVAILABLE),
        (400, ErrorCode.BAD_REQUEST),
        (404, ErrorCode.BAD_REQUEST),
        (422, ErrorCode.BAD_REQUEST),
    ],
)
def test_client_errors_mean_the_same_everywhere(
    surface: Surface, status: int, code: ErrorCode
) -> None:
    assert code_for_status(status, surface) is code


def test_server_errors_keep_each_surfaces_code() -> None:
    assert set(SURFACES) == set(Surface)
    for status in (500, 502, 503, 599):
        assert code_for_status(status, Surface.CONVERSE) is ErrorCode.TRANSPORT_CLOSED
        assert code_for_status(status, Surface.AVATAR_SESSION) is ErrorCode.SERVER_ERROR
    assert code_for_status(302, Surface.CONVERSE) is ErrorCode.TRANSPORT_CLOSED
    assert code_for_status(302, Surface.AVATAR_SESSION) is ErrorCode.BAD_REQUEST
