"""initial schema: leases, events, budgets, spend, settings, cooldowns

Revision ID: 0001
Revises: (none)
Create Date: 2026-11-22 00:02:04.781957
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op


revision = '0001'
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table('budget',
    sa.Column('account', sa.String(length=64), nullable=False),
    sa.Column('period', sa.String(length=8), nullable=False),
    sa.Column('limit_micros', sa.BigInteger(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('account', 'period', name=op.f('pk_budget'))
    )
    op.create_table('cooldown',
    sa.Column('offering', sa.String(length=256), nullable=False),
    sa.Column('until', sa.Float(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('offering', name=op.f('pk_cooldown'))
    )
    op.create_table('lease',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('node_name', sa.String(length=128), nullable=False),
    sa.Column('open_node', sa.String(length=128), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('market', sa.String(length=16), nullable=False),
    sa.Column('instance_id', sa.String(length=256), nullable=True),
    sa.Column('offering', sa.String(length=256), nullable=True),
    sa.Column('price_per_hour_micros', sa.BigInteger(), nullable=False),
    sa.Column('account', sa.String(length=64), nullable=False),
    sa.Column('job_ids', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.Float(), nullable=False),
    sa.Column('launched_at', sa.Float(), nullable=True),
    sa.Column('ready_at', sa.Float(), nullable=True),
    sa.Column('ended_at', sa.Float(), nullable=True),
    sa.Column('state_since', sa.Float(), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('attempt', sa.BigInteger(), nullable=False),
    sa.Column('accrued_until', sa.Float(), nullable=True),
    sa.Column('version', sa.BigInteger(), nullable=False),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lease')),
    sa.UniqueConstraint('open_node', name=op.f('uq_lease_open_node'))
    )
    with op.batch_alter_table('lease', schema=None) as batch_op:
        batch_op.create_index('ix_lease_node_name_created_at', ['node_name', 'created_at'], unique=False)
        batch_op.create_index('ix_lease_state', ['state'], unique=False)

    op.create_table('setting',
    sa.Column('key', sa.String(length=64), nullable=False),
    sa.Column('value', sa.Text(), nullable=False),
    sa.Column('updated_at', sa.Float(), nullable=False),
    sa.PrimaryKeyConstraint('key', name=op.f('pk_setting'))
    )
    op.create_table('lease_event',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lease_id', sa.String(length=32), nullable=False),
    sa.Column('at', sa.Float(), nullable=False),
    sa.Column('from_state', sa.String(length=16), nullable=True),
    sa.Column('to_state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.Text(), nullable=False),
    sa.Column('extra', sa.JSON(), nullable=False),
    sa.ForeignKeyConstraint(['lease_id'], ['lease.id'], name=op.f('fk_lease_event_lease_id_lease')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_lease_event'))
    )
    with op.batch_alter_table('lease_event', schema=None) as batch_op:
        batch_op.create_index('ix_lease_event_at', ['at'], unique=False)
        batch_op.create_index('ix_lease_event_lease_id_at', ['lease_id', 'at'], unique=False)

    op.create_table('spend_interval',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('lease_id', sa.String(length=32), nullable=False),
    sa.Column('pool', sa.String(length=64), nullable=False),
    sa.Column('account', sa.String(length=64), nullable=False),
    sa.Column('user', sa.String(length=64), nullable=True),
    sa.Column('job_id', sa.BigInteger(), nullable=True),
    sa.Column('start', sa.Float(), nullable=False),
    sa.Column('end', sa.Float(), nullable=False),
    sa.Column('price_per_hour_micros', sa.BigInteger(), nullable=False),
    sa.Column('cost_micros', sa.BigInteger(), nullable=False),
    sa.ForeignKeyConstraint(['lease_id'], ['lease.id'], name=op.f('fk_spend_interval_lease_id_lease')),
    sa.PrimaryKeyConstraint('id', name=op.f('pk_spend_interval'))
    )
    with op.batch_alter_table('spend_interval', schema=None) as batch_op:
        batch_op.create_index('ix_spend_interval_account_start', ['account', 'start'], unique=False)
        batch_op.create_index('ix_spend_interval_lease_id', ['lease_id'], unique=False)
        batch_op.create_index('ix_spend_interval_start', ['start'], unique=False)



def downgrade() -> None:
    with op.batch_alter_table('spend_interval', schema=None) as batch_op:
        batch_op.drop_index('ix_spend_interval_start')
        batch_op.drop_index('ix_spend_interval_lease_id')
        batch_op.drop_index('ix_spend_interval_account_start')

    op.drop_table('spend_interval')
    with op.batch_alter_table('lease_event', schema=None) as batch_op:
        batch_op.drop_index('ix_lease_event_lease_id_at')
        batch_op.drop_index('ix_lease_event_at')

    op.drop_table('lease_event')
    op.drop_table('setting')
    with op.batch_alter_table('lease', schema=None) as batch_op:
        batch_op.drop_index('ix_lease_state')
        batch_op.drop_index('ix_lease_node_name_created_at')

    op.drop_table('lease')
    op.drop_table('cooldown')
    op.drop_table('budget')
