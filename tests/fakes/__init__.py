"""Fakes for fault injection and for stages whose models cannot be had offline."""
