-- The operating-system account that ran each operator action, beside the
-- name the operator gave (`--operator`, free text). Additive only: a
-- release that does not know the column writes its rows without it (NULL).
ALTER TABLE operator_actions ADD COLUMN os_user TEXT;
