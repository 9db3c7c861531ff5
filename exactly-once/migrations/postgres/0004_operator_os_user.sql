-- The operating-system account that ran each operator action (additive
-- only). See migrations/sqlite/0004_operator_os_user.sql.
ALTER TABLE operator_actions ADD COLUMN IF NOT EXISTS os_user TEXT;
