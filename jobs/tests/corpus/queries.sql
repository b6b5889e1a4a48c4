# The query-shape corpus: `jobs/tests/query_corpus.rs` runs every statement below through
# silt's query service against the lake tier (`c.<t>$lake`) and the real-time view (`c.<t>`) of
# a log table (`c.events`) and of a primary-key table (`c.users`) whose lake holds deletion
# vectors, whose hot tail holds updates and deletes, and which has been compacted, and compares
# each answer with the same statement run by a plain DataFusion session over tables the test
# materialized from the changelog. Both tables have the columns
#   id BIGINT, grp INT, name STRING (NULL for some rows), score DOUBLE, flag BOOLEAN
# and each lake tier adds __bucket INT, __offset BIGINT, __timestamp TIMESTAMP (UTC, µs).
#
# A case is a header line, then its statement, up to the next blank line:
#   -- bag                 the answer equals the oracle's as a multiset of rows
#   -- ordered             ... in the same order (only for an ORDER BY over a unique key)
#   -- explain NEEDLE      it answers, and its plan text contains NEEDLE (no oracle)
# followed by optional tags: `@lake` or `@view` (the tier), `@log` or `@pk` (the table); a case
# runs on every target that has all its tags. In a statement, {t} is the target, {other} the
# same table's other tier and {snapshots} the table's `$lake$snapshots`.
#
# A statement must have one right answer: no LIMIT without an ORDER BY over a unique key
# except inside a count, no window or string_agg ordered by a column with ties.

# --- projections and filters

-- bag
SELECT * FROM {t}

-- bag
SELECT id, name FROM {t}

-- bag
SELECT id, score * 2 AS doubled, upper(name) AS loud, length(name) AS chars FROM {t}

-- bag
SELECT id FROM {t} WHERE id < 100

-- bag
SELECT id, grp FROM {t} WHERE name IS NULL

-- bag
SELECT id FROM {t} WHERE name LIKE 'u1%' OR name LIKE 'n1%'

-- bag
SELECT id, score FROM {t} WHERE score BETWEEN 5 AND 10 AND flag

-- bag
SELECT id FROM {t} WHERE grp IN (1, 3, 5) AND id % 2 = 0

-- bag
SELECT DISTINCT grp FROM {t}

-- bag
SELECT DISTINCT name FROM {t}

-- bag
SELECT id, CASE WHEN score > 10 THEN 'high' WHEN score > 5 THEN 'mid' ELSE 'low' END AS band FROM {t}

-- bag
SELECT id, coalesce(name, 'none') AS named FROM {t} WHERE NOT flag

-- bag
SELECT id FROM {t} WHERE id >= 590 AND id < 700

# --- aggregates

-- bag
SELECT count(*) FROM {t}

-- bag
SELECT count(name) FROM {t}

-- bag
SELECT sum(score) FROM {t}

-- bag
SELECT min(id), max(id) FROM {t}

-- bag
SELECT avg(score) FROM {t}

-- bag
SELECT min(name), max(name) FROM {t}

-- bag
SELECT count(DISTINCT grp), count(DISTINCT name) FROM {t}

-- bag
SELECT count(*), count(DISTINCT id) FROM {t}

-- bag
SELECT sum(id) FROM {t} WHERE flag

-- bag
SELECT stddev(score), var_pop(score) FROM {t}

-- bag
SELECT bool_and(flag), bool_or(flag) FROM {t}

-- bag
SELECT approx_distinct(id) FROM {t}

-- bag
SELECT median(score) FROM {t}

-- bag
SELECT string_agg(name, ',' ORDER BY id) FROM {t} WHERE id < 50

-- bag
SELECT array_agg(id ORDER BY id) FROM {t} WHERE grp = 2 AND id < 200

-- bag
SELECT sum(CASE WHEN flag THEN 1 ELSE 0 END), sum(score) FILTER (WHERE grp = 0) FROM {t}

# --- group by

-- bag
SELECT grp, count(*), sum(score) FROM {t} GROUP BY grp

-- ordered
SELECT grp, count(*) AS n FROM {t} GROUP BY grp ORDER BY grp

-- bag
SELECT grp, flag, count(*), min(id), max(id) FROM {t} GROUP BY grp, flag

-- bag
SELECT grp, count(DISTINCT name) FROM {t} GROUP BY grp

-- bag
SELECT grp, avg(score) FROM {t} GROUP BY grp HAVING count(*) > 50

-- bag
SELECT name IS NULL AS no_name, count(*) FROM {t} GROUP BY name IS NULL

-- bag
SELECT id % 10 AS digit, sum(score) FROM {t} GROUP BY id % 10

-- bag
SELECT grp, flag, count(*) FROM {t} GROUP BY ROLLUP (grp, flag)

# --- order by and limit

-- ordered
SELECT id, name FROM {t} ORDER BY id LIMIT 10

-- ordered
SELECT id, score FROM {t} ORDER BY id DESC LIMIT 5

-- ordered
SELECT id FROM {t} ORDER BY score DESC, id LIMIT 20

-- ordered
SELECT id FROM {t} ORDER BY id LIMIT 10 OFFSET 100

-- ordered
SELECT id FROM {t} WHERE id > 300 ORDER BY id LIMIT 3

-- ordered
SELECT name, id FROM {t} WHERE name IS NOT NULL ORDER BY name, id LIMIT 15

-- bag
SELECT count(*) FROM (SELECT id FROM {t} LIMIT 7)

-- bag
SELECT count(*) FROM (SELECT * FROM {t} LIMIT 3) l JOIN {t} r ON l.id = r.id AND l.score = r.score

# --- joins: with itself, with its other tier, with the other table

-- bag
SELECT count(*) FROM {t} a JOIN {t} b ON a.id = b.id

-- bag
SELECT a.grp, count(*) FROM {t} a JOIN {t} b ON a.grp = b.grp AND a.id < b.id WHERE a.id < 60 AND b.id < 60 GROUP BY a.grp

-- bag
SELECT count(*) FROM {t} a JOIN {other} b ON a.id = b.id

-- bag
SELECT a.id, a.score, b.score FROM {t} a JOIN {other} b ON a.id = b.id WHERE a.score <> b.score

-- bag
SELECT a.id, b.id IS NULL AS only_here FROM {t} a LEFT JOIN {other} b ON a.id = b.id

-- bag
SELECT count(*), count(a.id), count(b.id) FROM {t} a FULL OUTER JOIN {other} b ON a.id = b.id

-- bag
SELECT id FROM {t} WHERE id NOT IN (SELECT id FROM {other})

-- bag
SELECT count(*) FROM {t} WHERE id IN (SELECT id FROM {other} WHERE flag)

-- bag
SELECT count(*) FROM {t} a WHERE EXISTS (SELECT 1 FROM {other} b WHERE b.id = a.id AND b.grp = a.grp)

-- bag
SELECT count(*), sum(e.score) FROM {t} a JOIN c.events e ON a.id = e.id

-- bag
SELECT id FROM {t} UNION ALL SELECT id FROM {other}

-- bag
SELECT grp FROM {t} UNION SELECT grp FROM {other}

-- bag
SELECT id, grp FROM {t} EXCEPT SELECT id, grp FROM {other}

-- bag
SELECT id FROM {t} INTERSECT SELECT id FROM {other}

# --- window functions

-- bag
SELECT id, row_number() OVER (PARTITION BY grp ORDER BY id) FROM {t}

-- bag
SELECT id, rank() OVER (ORDER BY score DESC) FROM {t}

-- bag
SELECT id, sum(score) OVER (PARTITION BY grp) FROM {t}

-- bag
SELECT id, lag(id) OVER (ORDER BY id), lead(score) OVER (ORDER BY id) FROM {t}

-- bag
SELECT id, sum(id) OVER (ORDER BY id ROWS BETWEEN 2 PRECEDING AND CURRENT ROW) FROM {t}

-- bag
SELECT grp, id FROM (SELECT grp, id, row_number() OVER (PARTITION BY grp ORDER BY score DESC, id) AS rn FROM {t}) WHERE rn <= 2

-- bag
SELECT id, dense_rank() OVER (PARTITION BY flag ORDER BY grp), count(*) OVER (PARTITION BY grp, flag) FROM {t}

-- bag
SELECT id, first_value(id) OVER (PARTITION BY grp ORDER BY id) FROM {t}

-- bag
SELECT id, ntile(4) OVER (ORDER BY id) FROM {t}

# --- subqueries

-- bag
SELECT count(*) FROM {t} WHERE score > (SELECT avg(score) FROM {t})

-- bag
SELECT id FROM {t} a WHERE score = (SELECT max(score) FROM {t} b WHERE b.grp = a.grp)

-- bag
SELECT grp, n FROM (SELECT grp, count(*) AS n FROM {t} GROUP BY grp) s WHERE n > 10

-- bag
WITH big AS (SELECT id, grp FROM {t} WHERE score > 10) SELECT grp, count(*) FROM big GROUP BY grp

-- bag
WITH l AS (SELECT id FROM {t}), r AS (SELECT id FROM {other}) SELECT (SELECT count(*) FROM l) AS here, (SELECT count(*) FROM r) AS there, (SELECT count(*) FROM l JOIN r USING (id)) AS both_tiers

-- bag
SELECT id FROM {t} WHERE grp = (SELECT min(grp) FROM {other}) AND id < 100

-- bag
SELECT v.column1, count(t.id) FROM (VALUES (0), (1), (2)) v LEFT JOIN {t} t ON t.grp = v.column1 GROUP BY v.column1

# --- the lake's versions

-- bag
SELECT count(*) FROM {t} CROSS JOIN (SELECT max(version) AS v FROM {snapshots}) s

-- bag
SELECT s.operation, count(*) FROM {snapshots} s GROUP BY s.operation

-- ordered
SELECT version, bucket_offsets, checkpoint_id FROM {snapshots} ORDER BY version

-- bag
SELECT (SELECT count(*) FROM {snapshots}) AS versions, count(*) FROM {t}

-- bag @lake
SELECT s.version, count(l.id) FROM {snapshots} s LEFT JOIN {t} l ON l.__timestamp <= s.committed_at GROUP BY s.version

-- bag @lake
SELECT count(*) FROM {t} l, {snapshots} s WHERE s.version = (SELECT max(version) FROM {snapshots}) AND strpos(s.bucket_offsets, concat('"', CAST(l.__bucket AS VARCHAR), '":')) > 0

# --- the lake's system columns

-- bag @lake
SELECT __bucket, count(*), min(__offset), max(__offset) FROM {t} GROUP BY __bucket

-- bag @lake
SELECT id, __bucket, __offset, __timestamp FROM {t}

-- ordered @lake
SELECT __bucket, __offset, id FROM {t} ORDER BY __bucket, __offset LIMIT 20

-- bag @lake
SELECT count(*) FROM {t} a JOIN {t} b ON a.__bucket = b.__bucket AND a.__offset = b.__offset

-- bag @lake
SELECT max(__timestamp) - min(__timestamp) FROM {t}

-- bag @lake
SELECT a.id, a.__offset FROM {t} a JOIN {other} b ON a.id = b.id AND a.name IS NOT DISTINCT FROM b.name WHERE a.score = b.score AND a.grp = b.grp

# --- EXPLAIN: it answers and names the operator

-- explain AggregateExec
EXPLAIN SELECT count(*), sum(score) FROM {t}

-- explain HashJoinExec
EXPLAIN SELECT count(*) FROM {t} a JOIN {other} b ON a.id = b.id

-- explain TopK
EXPLAIN SELECT id FROM {t} ORDER BY id DESC LIMIT 3

-- explain WindowAggExec
EXPLAIN SELECT id, row_number() OVER (ORDER BY id) FROM {t}

-- explain DeltaScan @lake
EXPLAIN SELECT id FROM {t} WHERE grp = 4

-- explain LeftAnti @view @pk
EXPLAIN SELECT * FROM {t}

-- explain UnionExec @view @log
EXPLAIN SELECT id FROM {t}

-- explain output_rows
EXPLAIN ANALYZE SELECT sum(score) FROM {t} WHERE grp = 1
