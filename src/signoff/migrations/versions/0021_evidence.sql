-- The trail's hash chain on PostgreSQL: signoff.domain.evidence.trail_hash, computed by
-- the trigger that links each new task_events row to the task's previous one in the
-- statement that inserts it (no extra round trip; the task's row lock, taken by the
-- same statement, orders a task's records). Plain PL/pgSQL assignments: each is a simple
-- expression, evaluated without the executor.
CREATE FUNCTION signoff_trail_link() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    previous text;
    task_id text := NEW.task_id::text;
    version text := NEW.version::text;
    created_at text := to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US');
BEGIN
    SELECT e.hash INTO previous FROM task_events e
     WHERE e.task_id = NEW.task_id ORDER BY e.id DESC LIMIT 1;
    NEW.prev_hash := coalesce(previous, '');
    NEW.hash := encode(sha256(convert_to(
        'signoff-trail-v1' || E'\n' || NEW.prev_hash || E'\n'
        || octet_length(task_id) || ':' || task_id || E'\n'
        || octet_length(NEW.event_type) || ':' || NEW.event_type || E'\n'
        || octet_length(NEW.action) || ':' || NEW.action || E'\n'
        || octet_length(NEW.status) || ':' || NEW.status || E'\n'
        || octet_length(version) || ':' || version || E'\n'
        || octet_length(NEW.actor_id) || ':' || NEW.actor_id || E'\n'
        || octet_length(NEW.actor_role) || ':' || NEW.actor_role || E'\n'
        || octet_length(created_at) || ':' || created_at || E'\n'
        || octet_length(NEW.details) || ':' || NEW.details || E'\n',
        'UTF8')), 'hex');
    RETURN NEW;
END
$$;
-- next statement
CREATE TRIGGER task_events_link BEFORE INSERT ON task_events
    FOR EACH ROW EXECUTE FUNCTION signoff_trail_link();
