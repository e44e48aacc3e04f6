"""lease_gang: leases launched together, all or nothing (a multi-node job's nodes)

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-22 03:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0003'
down_revision = '0002'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('lease', schema=None) as batch_op:
        batch_op.add_column(sa.Column('gang', sa.String(length=32), nullable=True))
        batch_op.create_index(batch_op.f('ix_lease_gang'), ['gang'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('lease', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_lease_gang'))
        batch_op.drop_column('gang')
