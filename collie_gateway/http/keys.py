"""The application's keys: the settings, and one per service the routes call."""

from __future__ import annotations

from aiohttp import web

from collie_gateway.services.agents import Agents
from collie_gateway.services.answers import Answers
from collie_gateway.services.chats import Chats
from collie_gateway.services.crew import Crew
from collie_gateway.services.phonebus import PhoneBus
from collie_gateway.services.pushing import Pushing
from collie_gateway.services.roster import Roster
from collie_gateway.services.rows import Rows
from collie_gateway.settings import Settings

SETTINGS = web.AppKey("settings", Settings)
AGENTS = web.AppKey("agents", Agents)
ROWS = web.AppKey("rows", Rows)
CHATS = web.AppKey("chats", Chats)
ANSWERS = web.AppKey("answers", Answers)
PUSHING = web.AppKey("pushing", Pushing)
CREW = web.AppKey("crew", Crew)
BUS = web.AppKey("bus", PhoneBus)
ROSTER = web.AppKey("roster", Roster)
