"""Database engines: one module each, for what differs between them (opening a user's database
read-only, what a query may do). SQLite is the only one today; each new engine gets its module here.
"""
