#!/bin/sh
# A stand-in for ssh as `hardy run --launch-agent` calls it (`AGENT [-OPTION...] HOST COMMAND...`), for
# supervisor_judgement.py: hosts listed in FAKE_AGENT_DEAD (comma-separated) never answer, the
# others run the command here.
while [ "${1#-}" != "$1" ]; do shift; done  # options (-x): a launch agent with arguments
host=$1
shift
# FAKE_AGENT_LOG: each call's time, host and command, a line each.
[ -n "${FAKE_AGENT_LOG:-}" ] && echo "$(date +%s.%N) $host $*" >> "$FAKE_AGENT_LOG"
case ",${FAKE_AGENT_DEAD:-}," in
  *",$host,"*) exec sleep 60 ;;
esac
exec "$@"
