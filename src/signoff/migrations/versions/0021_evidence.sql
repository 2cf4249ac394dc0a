-- The trail's hash chain on PostgreSQL: signoff.domain.evidence.trail_hash in SQL, and
-- the trigger that links each new task_events row to the task's previous one in the
-- statement that inserts it (no extra round trip; the task's row lock, taken by the
-- same statement, orders a task's records). Statements are run one by one, split at
-- the lines that say so.
CREATE FUNCTION signoff_trail_hash(
    prev text, task_id text, event_type text, action text, status text, version int,
    actor_id text, actor_role text, created_at text, details text
) RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
SELECT encode(sha256(convert_to(
    'signoff-trail-v1' || E'\n' || prev || E'\n'
    || octet_length(task_id)::text || ':' || task_id || E'\n'
    || octet_length(event_type)::text || ':' || event_type || E'\n'
    || octet_length(action)::text || ':' || action || E'\n'
    || octet_length(status)::text || ':' || status || E'\n'
    || octet_length(version::text)::text || ':' || version::text || E'\n'
    || octet_length(actor_id)::text || ':' || actor_id || E'\n'
    || octet_length(actor_role)::text || ':' || actor_role || E'\n'
    || octet_length(created_at)::text || ':' || created_at || E'\n'
    || octet_length(details)::text || ':' || details || E'\n',
    'UTF8')), 'hex')
$$;
-- next statement
CREATE FUNCTION signoff_trail_link() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    previous text;
BEGIN
    SELECT e.hash INTO previous FROM task_events e
     WHERE e.task_id = NEW.task_id ORDER BY e.id DESC LIMIT 1;
    NEW.prev_hash := coalesce(previous, '');
    NEW.hash := signoff_trail_hash(
        NEW.prev_hash, NEW.task_id::text, NEW.event_type, NEW.action, NEW.status,
        NEW.version, NEW.actor_id, NEW.actor_role,
        to_char(NEW.created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'), NEW.details);
    RETURN NEW;
END
$$;
-- next statement
CREATE TRIGGER task_events_link BEFORE INSERT ON task_events
    FOR EACH ROW EXECUTE FUNCTION signoff_trail_link();
