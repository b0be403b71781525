"""The life cycle of one filtered response: the states, the events between them, the table.

Everything that moves :class:`~streamstop.server._middleware._Exchange` from one state to the
next is in this file (as h11's ``_state.py``): the exchange calls :func:`transition` at each
event and keeps the state it returns; a pair missing from :data:`TRANSITIONS` is a bug of the
exchange, raised as :class:`IllegalTransition` (never a client's or an app's doing: what an
app sends out of order is passed to the server as it is, which refuses it). Sans-I/O: no
anyio, no ASGI messages, only names.

The states (one per response)::

    AWAITING_START  the app has not started its response
    PASSING         started, passed on untouched (not 2xx JSON nor a stream, another
                    encoding, or a compressed body inflated and sent unfiltered)
    STREAMING       a stream, each body through the filter as it comes (SSE or NDJSON)
    HOLDING         a 2xx JSON body, start and body held until the last, then cut
    COMPLETE        the response has been sent whole (or refused: a 502, a 400)
    CLIENT_GONE     the client left (http.disconnect, or send failed) before COMPLETE

The events::

    START_PASS, START_STREAM, START_HOLD   the app's http.response.start, by what it decides
    END          the last body goes out (the app's, the filter's end, an error in its place)
    DISCONNECT   the client is gone

The table (state, event -> state); every other pair is illegal::

    AWAITING_START  START_PASS    PASSING
    AWAITING_START  START_STREAM  STREAMING
    AWAITING_START  START_HOLD    HOLDING
    AWAITING_START  END           COMPLETE      a body before any start, passed on as it is
    PASSING         END           COMPLETE
    STREAMING       END           COMPLETE
    HOLDING         END           COMPLETE
    (any live one)  DISCONNECT    CLIENT_GONE   the app is cancelled
    COMPLETE        DISCONNECT    COMPLETE      over already: the app is left to end
    CLIENT_GONE     DISCONNECT    CLIENT_GONE   the watcher and a failed send both saw it
    CLIENT_GONE     END           CLIENT_GONE   an end under way when the client left

Illegal, for example: a second start (COMPLETE or STREAMING + START_*), a second end
(COMPLETE + END), a start after the client left (CLIENT_GONE + START_*).
"""

from __future__ import annotations

from enum import Enum

__all__ = ["LIVE", "TRANSITIONS", "Event", "IllegalTransition", "State", "transition"]


class State(Enum):
    AWAITING_START = "awaiting_start"
    PASSING = "passing"
    STREAMING = "streaming"
    HOLDING = "holding"
    COMPLETE = "complete"
    CLIENT_GONE = "client_gone"


class Event(Enum):
    START_PASS = "start_pass"
    START_STREAM = "start_stream"
    START_HOLD = "start_hold"
    END = "end"
    DISCONNECT = "disconnect"


# The states in which the response is still being written (the app may still send).
LIVE = frozenset({State.AWAITING_START, State.PASSING, State.STREAMING, State.HOLDING})

TRANSITIONS: dict[tuple[State, Event], State] = {
    (State.AWAITING_START, Event.START_PASS): State.PASSING,
    (State.AWAITING_START, Event.START_STREAM): State.STREAMING,
    (State.AWAITING_START, Event.START_HOLD): State.HOLDING,
    (State.AWAITING_START, Event.END): State.COMPLETE,
    (State.PASSING, Event.END): State.COMPLETE,
    (State.STREAMING, Event.END): State.COMPLETE,
    (State.HOLDING, Event.END): State.COMPLETE,
    **{(state, Event.DISCONNECT): State.CLIENT_GONE for state in LIVE},
    (State.COMPLETE, Event.DISCONNECT): State.COMPLETE,
    (State.CLIENT_GONE, Event.DISCONNECT): State.CLIENT_GONE,
    (State.CLIENT_GONE, Event.END): State.CLIENT_GONE,
}


class IllegalTransition(RuntimeError):
    """An event the table has no row for in the current state: a bug of the exchange."""

    def __init__(self, state: State, event: Event) -> None:
        super().__init__(
            f"internal error: the response life cycle has no transition for {event.name} in "
            f"state {state.name} (see streamstop/server/_response_state.py)"
        )
        self.state = state
        self.event = event


def transition(state: State, event: Event) -> State:
    """The state after ``event`` in ``state``; :class:`IllegalTransition` if there is none."""
    try:
        return TRANSITIONS[state, event]
    except KeyError:
        raise IllegalTransition(state, event) from None
