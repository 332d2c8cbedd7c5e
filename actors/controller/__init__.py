"""The controller: event inbox, context, state machines, elections, channel, Ray shell."""
