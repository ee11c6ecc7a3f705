-- The demo's inventory schema and its products (make demo and docker-compose.yml's walflow-init): safe to run again.
CREATE TABLE IF NOT EXISTS customers (
    id serial PRIMARY KEY,
    first_name varchar(255) NOT NULL,
    last_name varchar(255) NOT NULL,
    email varchar(255) NOT NULL UNIQUE
);
CREATE TABLE IF NOT EXISTS products (
    id serial PRIMARY KEY,
    name varchar(255) NOT NULL,
    description text,
    weight double precision,
    price numeric(10, 2) NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS orders (
    id serial PRIMARY KEY,
    order_date date NOT NULL,
    purchaser int NOT NULL REFERENCES customers (id),
    quantity int NOT NULL,
    product_id int NOT NULL REFERENCES products (id),
    updated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO products (name, description, weight, price)
SELECT * FROM (VALUES
    ('scooter', 'Small 2-wheel scooter', 3.14::double precision, 19.99::numeric),
    ('car battery', '12V car battery', 8.1, 89.50),
    ('hammer', '16oz carpenter''s hammer', 1.0, 12.00),
    ('rocks', 'box of assorted rocks', 5.3, 4.25),
    ('spare tire', '24 inch spare tire', 22.2, 45.00)
) AS seed (name, description, weight, price)
WHERE NOT EXISTS (SELECT 1 FROM products);
